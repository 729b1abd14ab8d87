"""Config dataclasses from YAML files and `key=value` overrides, with errors that list the valid keys."""

from __future__ import annotations

import dataclasses
import re
import warnings
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "ConfigError",
    "check_at_least_one",
    "config_from_yaml",
    "config_values",
    "fold_dotted_keys",
    "parse_key_values",
    "put_dotted",
    "setting",
    "yaml_load",
]

T = TypeVar("T")


def _yaml_loader() -> type:
    import yaml

    class Loader(yaml.SafeLoader):
        """YAML 1.2 booleans: only true/false. YAML 1.1 also reads yes/no/on/off as booleans, which turns
        `save_strategy: no` into False."""

    bool_tag = "tag:yaml.org,2002:bool"
    Loader.yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != bool_tag]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    Loader.add_implicit_resolver(bool_tag, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
    return Loader


def yaml_load(text: str) -> Any:
    """Parse YAML text the way config files mean it (see `_yaml_loader`)."""
    import yaml

    return yaml.load(text, Loader=_yaml_loader())  # noqa: S506 - a SafeLoader subclass


def setting(
    default: Any = dataclasses.MISSING,
    help: str = "",  # noqa: A002 - the word HfArgumentParser and argparse use
    *,
    factory: Callable[[], Any] | None = None,
    **metadata: Any,
) -> Any:
    """A config dataclass field with its help: `setting(32, "items per batch")`, `setting(help=..., factory=list)`.

    One spelling for the `field(default=..., metadata={"help": ...})` that TRL's `HfArgumentParser` and this
    project's `ConfigFlags` read; other metadata (`metavar`) passes through. No default and no factory: the
    field is required."""
    metadata = {"help": help, **metadata}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


class ConfigError(ValueError):
    """A config file or override that does not fit its dataclass."""


def parse_key_values(pairs: Iterable[str], example: str = "max_steps=20") -> dict[str, Any]:
    """`["max_steps=20", "kinds=[count]"]` → `{"max_steps": 20, "kinds": ["count"]}` (values read as YAML).

    >>> parse_key_values(["use_lora=true", "kinds=[count]"])
    {'use_lora': True, 'kinds': ['count']}
    """
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"override {pair!r} must look like key=value (e.g. {example})")
        out[key.strip()] = yaml_load(value)
    return out


def put_dotted(mapping: dict[str, Any], dotted: str, value: Any) -> None:
    """Set `a.b.c` in `mapping` (in place), making a fresh dict of each level on the way.

    >>> values = {"model": {"backend": "openai"}}; put_dotted(values, "model.options.timeout", 30); values
    {'model': {'backend': 'openai', 'options': {'timeout': 30}}}
    """
    head, _, rest = dotted.partition(".")
    if not rest:
        mapping[head] = value
        return
    inner = mapping.get(head)
    mapping[head] = inner = dict(inner) if isinstance(inner, Mapping) else {}
    put_dotted(inner, rest, value)


def fold_dotted_keys(values: Mapping[str, Any], nested: Iterable[str]) -> dict[str, Any]:
    """`values` with `a.b.c=…` keys folded into the mapping field `a`, for each `a` in `nested`.

    On the command line a nested field is set one key at a time (`model.model=http://host:8000/v1`), on top
    of what the YAML gave it.

    >>> fold_dotted_keys({"model": {"backend": "openai"}, "model.model": "http://h:8000/v1"}, ["model"])
    {'model': {'backend': 'openai', 'model': 'http://h:8000/v1'}}
    """
    out = dict(values)
    heads = set(nested)
    for key in [k for k in out if "." in k and k.split(".", 1)[0] in heads]:
        head, _, rest = key.partition(".")
        if out.get(head) is not None and not isinstance(out[head], Mapping):
            raise ConfigError(f"{key}: {head} is {out[head]!r}, not a mapping to set {rest} in")
        put_dotted(out, key, out.pop(key))
    return out


def check_at_least_one(config: Any, names: Iterable[str]) -> None:
    """A config's `__post_init__` check: each field in `names` is at least 1, else a ValueError naming it."""
    for name in names:
        if getattr(config, name) < 1:
            raise ValueError(f"{name} ({getattr(config, name)}) must be at least 1")


def _renamed(values: dict[str, Any], renamed: Mapping[str, str], where: str) -> dict[str, Any]:
    """`values` with old field names read as their new ones, each with a warning naming the new one."""
    for old, new in renamed.items():
        if old in values:
            warnings.warn(f"{where}: `{old}` is now `{new}`; read as `{new}`", FutureWarning, stacklevel=3)
            values[new] = values.pop(old)
    return values


def config_values(
    cls: type,
    path: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    fields_hint: str | None = None,
    renamed: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The field values for `cls`: a YAML mapping (optional) with `overrides` on top, unknown keys refused.

    The refusal lists the valid fields, or says `fields_hint` instead (for configs with hundreds of them).
    `renamed` maps old field names to new ones: an old name still works, with a warning.
    """
    values: dict[str, Any] = {}
    where = str(path) if path else "config"
    if path is not None:
        import yaml

        try:
            loaded = yaml_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"{where}: cannot read ({exc})") from exc
        if not isinstance(loaded, dict):
            raise ConfigError(f"{where}: expected a mapping of {cls.__name__} fields, got {type(loaded).__name__}")
        values.update(_renamed(loaded, renamed or {}, where))
    values.update(_renamed(dict(overrides or {}), renamed or {}, where))
    nest = getattr(cls, "nest_config_values", None)  # a class with nested fields folds `a.b=…` and old keys in
    if nest is not None:
        values = nest(values)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        hint = fields_hint or f"valid fields: {sorted(known)}"
        raise ConfigError(f"{where}: unknown {cls.__name__} field(s) {unknown}; {hint}")
    return values


def config_from_yaml(cls: type[T], path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> T:
    """Build `cls` from a YAML mapping (optional) with `overrides` on top.

    Unknown keys are refused with the list of valid ones; the dataclass's own `__post_init__` checks then
    run, and their messages are passed on with the file name.
    """
    values = config_values(cls, path, overrides)
    try:
        return cls(**values)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{str(path) if path else 'config'}: {exc}") from exc

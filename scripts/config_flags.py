"""One convention for config dataclasses on the command line: each field is a `--kebab-case` flag.

    JUDGE = ConfigFlags(JudgeConfig)            # every flaggable field; `prompt` (a nested dataclass) stays YAML-only
    JUDGE.add_to(parser.add_argument_group("judge"))
    config = JUDGE.config(args, path=args.config)   # field default < YAML file < flags given

The field says everything a flag needs: its name (`max_new_tokens` → `--max-new-tokens`, with an optional
prefix: `--reasoner-max-tokens`), its type (`X | None` reads an X; `Literal[...]` gives the choices; `bool`
is a switch, with `--no-NAME` when it defaults to true or None; an `Enum` gives its values as choices; `X | str`
reads an X; `list[X]` takes one or more values), its help
(`metadata={"help": ...}`, as `judge.config.setting` writes it; `"metavar"` too) and its default, shown as `(default: …)`. A flag left out is
*not given*, never its default: the YAML file beneath it keeps its value. Field checks stay in the
dataclass's `__post_init__`, so a bad value fails the same way from a flag, a YAML key or Python.

Every field (flaggable or not) can also be given as `key=value` (`add_key_values`; values read as YAML), the
same thing as its flag: `max_steps=20` is `--max-steps 20`. A command whose config class is costly to
import (TRL's, seconds) adds its flags only when it runs or shows its help (`LazyFlagsParser`).

These are the type rules of `transformers.HfArgumentParser` (read in transformers 5.24.0,
`transformers/hf_argparser.py`, which TRL 1.16.0's `TrlParser` extends); it is not used itself because
it is a parser class rather than flags added to one of `mrjudge`'s subcommands, sets every flag's
default (so a `--config` file's values would be overwritten by defaults unless parsed twice, as
`TrlParser` does), registers each field as both `--snake_case` and `--kebab-case`, and costs ~1.5 s of
`transformers` import before any `mrjudge` command could print its help. See docs/cli.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

__all__ = ["ConfigFlags", "LazyFlagsParser", "add_key_values", "flag_name"]

T = TypeVar("T")
_NOT_SHOWN = object()


def flag_name(field: str, prefix: str = "") -> str:
    """The flag of a field: `--` + prefix + name, underscores as dashes.

    >>> flag_name("max_new_tokens"), flag_name("top_p", "reasoner")
    ('--max-new-tokens', '--reasoner-top-p')
    """
    return "--" + (f"{prefix}_{field}" if prefix else field).replace("_", "-")


def _unwrap_optional(hint: Any) -> Any:
    """`X | None` and `X | str` → X (TRL's `SchedulerType | str`); other hints unchanged (a union of two
    other types has no single flag type)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 2 and str in args:
            args.remove(str)
        return args[0] if len(args) == 1 else hint
    return hint


def _is_enum(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, enum.Enum)


def _flaggable(hint: Any) -> bool:
    """Whether one flag can carry the field (nested dataclasses and mappings stay YAML-only)."""
    hint = _unwrap_optional(hint)
    origin = typing.get_origin(hint)
    if origin is Literal:
        return True
    if origin in (list, tuple):
        return _flaggable((typing.get_args(hint) or (str,))[0])
    return hint in (bool, int, float, str, Path) or _is_enum(hint)


def _argument(hint: Any, default: Any) -> dict[str, Any]:
    """argparse keywords (type, choices, nargs, action) for a field of type `hint` defaulting to `default`."""
    hint = _unwrap_optional(hint)
    origin = typing.get_origin(hint)
    if hint is bool:
        if default is True or default is None:
            return {"action": argparse.BooleanOptionalAction}
        return {"action": "store_const", "const": True}
    if origin is Literal:
        choices = typing.get_args(hint)
        return {"choices": choices, "type": type(choices[0])}
    if _is_enum(hint):  # the values as strings; the dataclass turns them into members
        return {"choices": [str(member.value) for member in hint], "type": str}
    if origin in (list, tuple):
        return {"nargs": "+", "type": (typing.get_args(hint) or (str,))[0]}
    return {"type": hint}


@dataclasses.dataclass(frozen=True)
class ConfigFlags(Generic[T]):
    """The flags of one config dataclass: which fields, under which prefix; adds them and reads them back.

    Args:
        cls: the config dataclass (fields with `metadata={"help": ...}`).
        skip: fields that get no flag here (a command that uses the name for something else).
        prefix: put before every flag and attribute name (`prefix="reasoner"`: `--reasoner-top-p`, `args.reasoner_top_p`).
    """

    cls: type[T]
    skip: tuple[str, ...] = ()
    prefix: str = ""

    def _hints(self) -> dict[str, Any]:
        return typing.get_type_hints(self.cls)

    @property
    def names(self) -> tuple[str, ...]:
        """The fields that get a flag, in the dataclass's order."""
        hints = self._hints()
        unknown = sorted(set(self.skip) - {f.name for f in dataclasses.fields(self.cls)})
        if unknown:
            raise ValueError(f"ConfigFlags({self.cls.__name__}): skip names no field: {unknown}")
        return tuple(
            f.name
            for f in dataclasses.fields(self.cls)
            if f.init and f.name not in self.skip and _flaggable(hints[f.name])
        )

    def dest(self, name: str) -> str:
        """The attribute the parsed flag lands on."""
        return f"{self.prefix}_{name}" if self.prefix else name

    def add_to(
        self,
        parser: argparse.ArgumentParser | argparse._ArgumentGroup,
        *,
        help: Mapping[str, str] | None = None,  # noqa: A002 - argparse's word
        defaults: Mapping[str, Any] | None = None,
        shown: Mapping[str, Any] | None = None,
    ) -> None:
        """Add one flag per field to `parser` (or an argument group).

        Args:
            help: this command's wording for some fields, in place of their `metadata["help"]`.
            defaults: values this command fills in when the flag is left out (then always *given*).
            shown: what `(default: …)` says for some fields, when the default lives elsewhere
                (None: say nothing).
        """
        help, defaults, shown = dict(help or {}), dict(defaults or {}), dict(shown or {})
        fields = {f.name: f for f in dataclasses.fields(self.cls)}
        hints = self._hints()
        names = self.names
        for key, given in (("help", help), ("defaults", defaults), ("shown", shown)):
            if set(given) - set(names):
                raise ValueError(f"{key} names fields without a flag here: {sorted(set(given) - set(names))}")
        for name in names:
            f = fields[name]
            default = defaults.get(name, _field_default(f))
            kwargs = _argument(hints[name], default)
            text = help.get(name, f.metadata.get("help", ""))
            show = shown.get(name, default)
            if show is not None and show is not _NOT_SHOWN and kwargs.get("action") is None:
                text = f"{text} (default: {show})" if text else f"default: {show}"
            if "metavar" in f.metadata:
                kwargs["metavar"] = f.metadata["metavar"]
            elif "choices" not in kwargs and kwargs.get("action") is None:
                kwargs["metavar"] = name.upper()
            parser.add_argument(
                flag_name(name, self.prefix),
                dest=self.dest(name),
                default=defaults.get(name),
                help=text.replace("%", "%%"),
                **kwargs,
            )

    def values(self, args: argparse.Namespace) -> dict[str, Any]:
        """The fields whose flags were given (or filled in by the command), then those given as `key=value`
        (`add_key_values`), as `{field: value}`."""
        from judge.config import parse_key_values

        values = {}
        for name in self.names:
            value = getattr(args, self.dest(name), None)
            if value is not None:
                values[name] = value
        values.update(parse_key_values(getattr(args, "key_values", None) or [], getattr(args, "key_value_example", "")))
        return values

    def config(
        self, args: argparse.Namespace, path: str | Path | None = None, extra: Mapping[str, Any] | None = None
    ) -> T:
        """The dataclass: its defaults, then the YAML file at `path` (if any), then the flags given, then `extra`.

        Raises `judge.config.ConfigError` naming the file or field and the fix.
        """
        from judge.config import config_from_yaml

        return config_from_yaml(self.cls, path, {**self.values(args), **(extra or {})})


def add_key_values(parser: argparse.ArgumentParser, example: str) -> None:
    """`key=value …` after the flags: any field of the command's config, the same as its flag (values read as
    YAML: `use_lora=true`, `kinds=[count]`); `ConfigFlags.values` reads them after the flags."""
    parser.add_argument(
        "key_values",
        nargs="*",
        metavar="key=value",
        help=f"any config field, the same as its flag (values read as YAML), e.g. {example}",
    )
    parser.set_defaults(key_value_example=example)


class LazyFlagsParser(argparse.ArgumentParser):
    """A subcommand's parser that adds its flags (`add_flags(parser)`) only when that subcommand runs or shows
    its help, so `mrjudge --help` does not import every config's library (TRL's configs: seconds).

    Used as `add_subparsers(parser_class=LazyFlagsParser)`, then `add_parser(name, add_flags=…)`.
    """

    def __init__(self, *args: Any, add_flags: Callable[[argparse.ArgumentParser], None] | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._add_flags = add_flags

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:  # type: ignore[override]
        if self._add_flags is not None:
            add, self._add_flags = self._add_flags, None
            add(self)
        return super().parse_known_args(args, namespace)


def _field_default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return _NOT_SHOWN

"""Config dataclasses from YAML files and `key=value` overrides, with errors that list the valid keys."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["ConfigError", "config_from_yaml"]

T = TypeVar("T")


class ConfigError(ValueError):
    """A config file or override that does not fit its dataclass."""


def config_from_yaml(cls: type[T], path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> T:
    """Build `cls` from a YAML mapping (optional) with `overrides` on top.

    Unknown keys are refused with the list of valid ones; the dataclass's own `__post_init__` checks then
    run, and their messages are passed on with the file name.
    """
    values: dict[str, Any] = {}
    where = str(path) if path else "config"
    if path is not None:
        import yaml

        try:
            loaded = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"{where}: cannot read ({exc})") from exc
        if not isinstance(loaded, dict):
            raise ConfigError(f"{where}: expected a mapping of {cls.__name__} fields, got {type(loaded).__name__}")
        values.update(loaded)
    values.update(overrides or {})
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown {cls.__name__} field(s) {unknown}; valid fields: {sorted(known)}")
    try:
        return cls(**values)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {exc}") from exc

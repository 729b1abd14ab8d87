"""Recipe configs as files: read from YAML with `key=value` overrides, and written back beside the checkpoints.

Configs are TRL's own `SFTConfig` / `GRPOConfig` extended with field mixins (`training.model_config`'s
`JudgeModelArguments`, `training.replay_trainer`'s `ReplayArguments`), so every TRL and `TrainingArguments`
option works as documented there and the help text of each field is its documentation. Each mixin checks its
fields in its `__post_init__` and hands on to the next one in the MRO (`post_init_next`), down to TRL's checks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml

from judge.config import config_values, parse_key_values

__all__ = ["load_config", "post_init_next", "save_resolved_config"]

C = TypeVar("C")


def post_init_next(config: Any, mixin: type) -> None:
    """Run the `__post_init__` after `mixin`'s in `config`'s MRO, if any: a field mixin's checks, then those of the
    next mixin or of the TRL config it is mixed into."""
    parent = getattr(super(mixin, config), "__post_init__", None)
    if parent is not None:
        parent()


def load_config(
    cls: type[C], path: str | Path | None = None, overrides: list[str] | Mapping[str, Any] | None = None
) -> C:
    """`cls` from a YAML file with overrides: `key=value` strings (values parsed as YAML: `max_steps=20`,
    `use_lora=true`) or a mapping of field values (`mrjudge train`'s flags).

    Unknown keys fail with the list of valid ones; TRL's own checks run in `__post_init__`.
    """
    from transformers import HfArgumentParser

    parsed = dict(overrides) if isinstance(overrides, Mapping) else parse_key_values(overrides or [])
    values = config_values(cls, path, parsed, fields_hint="see `mrjudge train … --help-fields` for the valid ones")
    for name in ("model_name_or_path", "train_file"):
        if not values.get(name):
            raise ValueError(f"{cls.__name__}.{name} is required (set it in the YAML or as {name}=…)")
    (config,) = HfArgumentParser(cls).parse_dict(values, allow_extra_keys=False)
    return config


def save_resolved_config(config: Any, output_dir: str | Path) -> Path:
    """Write every field's final value next to the checkpoints, so a run can be reproduced from its folder."""
    path = Path(output_dir) / "mrjudge_config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    values = config.to_dict()  # TrainingArguments' own serialisation: enums as their values, no secrets
    plain = json.loads(json.dumps(values, default=str))
    path.write_text(f"# resolved {type(config).__name__}\n" + yaml.safe_dump(plain, sort_keys=True))
    return path

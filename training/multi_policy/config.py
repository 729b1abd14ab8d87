"""Config of a multi-policy GRPO run: the shared base, and one `PolicySpec` per LoRA policy.

    model_name_or_path: runs/tiny-lm
    output_dir: runs/policies
    max_steps: 20
    policy_defaults: {num_generations: 4, learning_rate: 1.0e-4}
    policies:
      - {name: geometry, train_file: data/geometry.jsonl, seed: 1}
      - {name: counting, train_file: data/counting.jsonl, seed: 2, reward: judge, judge_server_url: http://…}

Each policy entry is `policy_defaults` with its own fields on top. The GRPO and optimiser fields are TRL's
`GRPOConfig` fields themselves (`GRPO_FIELDS`: name, type, help and, unless `_DEFAULTS` says otherwise,
default), so a single-policy config reads the same and `--help-fields` prints TRL's help.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trl import GRPOConfig

from judge.config import ConfigError, config_values, parse_key_values, setting

__all__ = ["GRPO_FIELDS", "LOSS_TYPES", "SCALE_REWARDS", "MultiPolicyConfig", "PolicySpec", "load_multi_policy_config"]

LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo")
"""TRL's loss types this loop implements (TRL's meanings; `dapo` is TRL's default)."""
SCALE_REWARDS = ("group", "batch", "none")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")  # the adapter store's policy-name rule

GRPO_FIELDS = (
    "seed",
    "num_generations",
    "max_completion_length",
    "temperature",
    "beta",
    "epsilon",
    "epsilon_high",
    "loss_type",
    "scale_rewards",
    "learning_rate",
    "weight_decay",
    "lr_scheduler_type",
    "warmup_steps",
    "max_grad_norm",
)
"""The `GRPOConfig` fields (its `TrainingArguments` ones included) a policy sets for itself."""
# TRL's defaults are sized for one 7B run (8 completions of 512 tokens, lr 1e-6, seed 42); a policy here is one
# small LoRA among several, stepped on a few prompts.
_DEFAULTS: dict[str, Any] = {"seed": 0, "num_generations": 4, "max_completion_length": 32, "learning_rate": 1e-4}
_NOTES = {
    "seed": " Here it also seeds the adapter's init and the data order.",
    "beta": " The reference model is the base (this policy's adapter switched off).",
    "loss_type": f" Multi-policy GRPO implements {', '.join(LOSS_TYPES)}.",
}


def _grpo_fields() -> list[tuple[str, Any, Any]]:
    """`GRPO_FIELDS` as `make_dataclass` entries: TRL's type and help, TRL's default unless `_DEFAULTS` has one."""
    trl = {f.name: f for f in dataclasses.fields(GRPOConfig)}
    types = typing.get_type_hints(GRPOConfig)  # not `Field.type`: HfArgumentParser rewrites those in place
    return [
        (
            name,
            types[name],
            setting(_DEFAULTS.get(name, trl[name].default), trl[name].metadata["help"] + _NOTES.get(name, "")),
        )
        for name in GRPO_FIELDS
    ]


_PolicyGRPOFields = dataclasses.make_dataclass("PolicyGRPOFields", _grpo_fields(), kw_only=True)


@dataclass
class PolicySpec(_PolicyGRPOFields):
    """One policy: its data, its reward, its LoRA adapter and its own GRPO and optimiser settings (`GRPO_FIELDS`)."""

    name: str = setting(help="Policy name: the adapter's name and its policy in the adapter store.")
    train_file: str = setting(help="Prompts JSONL ({prompt | question, answer?}), as for `mrjudge train policy`.")
    init_from: str | None = setting(
        None,
        "Continue a revision in the run's adapter store (`policy`, `policy@alias`, `policy@id`): its "
        "weights, rank and targets (the lora_* fields are then ignored); exports name it as their parent.",
    )
    # Rollouts (the GRPOConfig ones: num_generations, max_completion_length, temperature)
    prompts_per_step: int = setting(4, "Prompts per GRPO step (each gives a group).")
    max_prompt_length: int = setting(256, "Prompt tokens kept (the last ones).")
    # Reward
    reward: str = setting(
        "training.multi_policy.rewards:reference_f1",
        "`module:callable` with TRL's reward signature (completions, prompts, **columns), or "
        "`judge` for the judge reward server at judge_server_url.",
    )
    reward_kwargs: dict[str, Any] = setting(
        help="Keyword arguments when `reward` names a class or factory.", factory=dict
    )
    judge_server_url: str | None = setting(None, "With reward=judge: `mrjudge serve` root.")
    judge_mode: str = setting("listwise", "With reward=judge: listwise, pairwise, tournament.")
    judge_reference_column: str | None = setting("answer", "With reward=judge: the reference column (pairwise mode).")
    # LoRA
    lora_r: int = setting(8, "LoRA rank.")
    lora_alpha: int = setting(16, "LoRA alpha.")
    lora_target_modules: list[str] | str = setting(
        help="Modules the adapter wraps (a list, or `all-linear`).",
        factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
    )

    def __post_init__(self) -> None:
        where = f"policy {self.name!r}"
        if not isinstance(self.name, str) or not _NAME.match(self.name) or self.name == "__base__":
            raise ValueError(f"{where}: name must match {_NAME.pattern} (letters, digits, . _ -)")
        if self.loss_type not in LOSS_TYPES:
            raise ValueError(f"{where}: loss_type must be one of {', '.join(LOSS_TYPES)}, got {self.loss_type!r}")
        self.scale_rewards = {True: "group", False: "none"}.get(self.scale_rewards, self.scale_rewards)  # as TRL
        if self.scale_rewards not in SCALE_REWARDS:
            raise ValueError(f"{where}: scale_rewards must be one of {', '.join(SCALE_REWARDS)}")
        if self.num_generations < 2:  # TRL's rule
            raise ValueError(f"{where}: num_generations must be >= 2 (advantages are relative to the group)")
        for key in ("prompts_per_step", "max_prompt_length", "max_completion_length", "lora_r"):
            if getattr(self, key) < 1:
                raise ValueError(f"{where}: {key} must be >= 1, got {getattr(self, key)}")
        if self.temperature <= 0:
            raise ValueError(f"{where}: temperature must be > 0 (sampling), got {self.temperature}")
        if self.reward == "judge" and not self.judge_server_url:
            raise ValueError(f"{where}: reward=judge needs judge_server_url=http://… (a `mrjudge serve` server)")
        if self.reward != "judge" and ":" not in self.reward:
            raise ValueError(f"{where}: reward must be `module:callable` or `judge`, got {self.reward!r}")

    @property
    def rows_per_step(self) -> int:
        return self.prompts_per_step * self.num_generations

    def warmup_steps_for(self, num_training_steps: int) -> int:
        """`warmup_steps` in steps, read as TRL reads it (below 1: a fraction of the training steps)."""
        return GRPOConfig.get_warmup_steps(self, num_training_steps)


@dataclass
class MultiPolicyConfig:
    """The run: one base model in memory, the policies trained over it, and how the steps are batched."""

    model_name_or_path: str = setting(help="Base model every adapter sits on (a causal text LM).")
    policies: list[PolicySpec] = setting(help="The policies: a list of PolicySpec mappings.")
    output_dir: str = setting("runs/policies", "Logs, status and (default) adapter store.")
    max_steps: int = setting(20, "GRPO steps per policy.")
    concurrent: bool = setting(
        True, "Step all policies together in mixed-adapter batches; false trains them one after another."
    )
    forward_batch_rows: int | None = setting(
        None,
        "Rows per training forward/backward (mixed across policies); default: the largest policy's "
        "rows per step, so concurrent activations peak no higher than one policy's.",
    )
    adapter_store: str | None = setting(None, "Adapter store revisions go to (default: OUTPUT_DIR/adapters).")
    save_steps: int = setting(0, "Export a revision every N steps (0: only at the end).")
    logging_steps: int = setting(1, "Print a line per policy every N steps (0: quiet).")
    device: str | None = setting(None, "cpu or cuda (default: cuda when available).")
    dtype: str = setting("float32", "Base and adapter dtype: float32 or bfloat16.")
    policy_defaults: dict[str, Any] = setting(
        help="PolicySpec fields every policy gets unless it sets its own.", factory=dict
    )

    def __post_init__(self) -> None:
        self.policies = [self._policy(i, entry) for i, entry in enumerate(self.policies or [])]
        if not self.policies:
            raise ValueError("policies is empty: list at least one {name, train_file} mapping")
        names = [p.name for p in self.policies]
        if len(set(names)) != len(names):
            raise ValueError(f"policy names must be unique, got {names}")
        if self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {self.max_steps}")
        if self.forward_batch_rows is not None and self.forward_batch_rows < 1:
            raise ValueError(f"forward_batch_rows must be >= 1 or null, got {self.forward_batch_rows}")
        if self.dtype not in ("float32", "bfloat16"):
            raise ValueError(f"dtype must be float32 or bfloat16, got {self.dtype!r}")

    def _policy(self, index: int, entry: Any) -> PolicySpec:
        if isinstance(entry, PolicySpec):
            return entry
        if not isinstance(entry, dict):
            raise ValueError(f"policies[{index}] must be a mapping of PolicySpec fields, got {type(entry).__name__}")
        values = {**self.policy_defaults, **entry}
        known = {f.name for f in dataclasses.fields(PolicySpec)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"policies[{index}]: unknown PolicySpec field(s) {unknown}; valid fields: {sorted(known)}")
        missing = [key for key in ("name", "train_file") if not values.get(key)]
        if missing:
            raise ValueError(f"policies[{index}]: set {' and '.join(missing)} (every policy needs its own)")
        return PolicySpec(**values)

    @property
    def store_root(self) -> Path:
        return Path(self.adapter_store) if self.adapter_store else Path(self.output_dir) / "adapters"


def load_multi_policy_config(
    path: str | Path | None, overrides: list[str] | Mapping[str, Any] | None = None
) -> MultiPolicyConfig:
    """The run's config from YAML with overrides of its top-level fields: `key=value` strings (values parsed
    as YAML) or a mapping (`mrjudge train policies`' flags)."""
    parsed = dict(overrides) if isinstance(overrides, Mapping) else parse_key_values(overrides or [])
    values = config_values(MultiPolicyConfig, path, parsed)
    for key in ("model_name_or_path", "policies"):
        if not values.get(key):
            raise ConfigError(f"{path or 'config'}: MultiPolicyConfig.{key} is required")
    try:
        return MultiPolicyConfig(**values)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{path or 'config'}: {exc}") from exc

"""`DemoConfig`: every budget of `mrjudge demo` in one dataclass: the tiny judge's recipe and the demo's own.

    mrjudge demo --config configs/demo.yaml --sft-max-steps 400 --grpo-max-steps 0
    mrjudge demo --quick                     # every stage on tiny budgets, well under a minute (tests)

Precedence: the defaults (the full demo), then the quick preset (`--quick` or `quick: true`), then the YAML
file, then the command line's flags (or `key=value`, the same thing). A field a trainer reads has TRL's name
(`policy_num_generations` is the policy GRPO's `num_generations`); the old names are still read (`RENAMED`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from judge.config import ConfigError, check_at_least_one, config_values, setting
from tiny_world.recipe import RENAMED as RECIPE_RENAMED
from tiny_world.recipe import TinyJudgeRecipe, check_group

__all__ = ["QUICK", "RENAMED", "DemoConfig", "load_demo_config"]


@dataclass
class DemoConfig(TinyJudgeRecipe):
    """What the demo builds and how long each stage may take (in steps and items; wall time is measured).

    The judge's recipe fields (world, data, warm-up, SFT, GRPO) are `TinyJudgeRecipe`'s, with its defaults
    and help: the demo trains its judge exactly as `benchmarks/learning_curve.py` does.
    """

    # Run
    threads: int | None = setting(None, "torch threads (default: torch's choice)")
    wall_budget_s: float = setting(
        1200.0, "the whole demo's budget (measured: 910–1,164 s on 2 quiet cores, by machine); a warning above it"
    )
    heldout_goal: float = setting(0.85, "held-out accuracy the summary checks against")

    # Held-out evaluation
    heldout_n: int = setting(200, "VL-RewardBench-format held-out pairs")
    untrained_heldout_n: int = setting(
        64, "of those, pairs the untrained judge is scored on (it writes no answer: a baseline)"
    )
    eval_batch_size: int = setting(16, "items per judge batch in evaluation")

    # MM-Vet-style best-of-N
    bon_questions: int = setting(48, "held-out questions for best-of-N")
    bon_n: int = setting(4, "candidates per question (N)")
    bon_gold_share: float = setting(0.35, "chance a candidate is the right answer")

    # A seeing policy, then GRPO against the reward server (TRL's names after `policy_`)
    policy_size: str = setting("tiny", "tiny-model size of the policy")
    policy_vision_warmup_steps: int = setting(
        600, "the policy's own perception warm-up steps (then its tower is frozen)"
    )
    policy_sft_max_steps: int = setting(800, "policy SFT steps on right answers (lr 3e-3)")
    policy_correct_share: float = setting(
        1.0, "share of right answers in the policy's warm-start data (the rest are wrong)"
    )
    policy_max_steps: int = setting(150, "policy GRPO steps per reward arm")
    policy_per_device_train_batch_size: int = setting(16, "policy GRPO completions per step")
    policy_num_generations: int = setting(4, "completions per prompt in policy GRPO")
    policy_max_completion_length: int = setting(24, "policy answer budget (tokens)")
    policy_learning_rate: float = setting(2e-4, "policy GRPO learning rate")
    policy_beta: float = setting(0.04, "KL penalty keeping the policy near its start")
    policy_heldout: int = setting(200, "validation questions for exact answers before/after")
    policy_samples: int = setting(4, "sampled answers per validation question")
    policy_oracle_arm: bool = setting(True, "also GRPO the policy with the answer key as its reward, for comparison")
    policy_audit_rate: float = setting(
        0.05, "share of the judge arm's reward groups the answer key audits (judge.reward.audit; 0: off)"
    )

    quick: bool = setting(False, "start from the quick preset (tiny budgets, for tests)")

    def recipe(self) -> TinyJudgeRecipe:
        """The judge recipe these budgets ask for (the same one `benchmarks/learning_curve.py` runs)."""
        return TinyJudgeRecipe(**{f.name: getattr(self, f.name) for f in fields(TinyJudgeRecipe)})

    def __post_init__(self) -> None:
        super().__post_init__()
        from tiny_world.model import TINY_SIZES

        if self.policy_size not in TINY_SIZES:
            raise ValueError(f"policy_size must be one of {sorted(TINY_SIZES)}, got {self.policy_size!r}")
        positive = ("heldout_n", "untrained_heldout_n", "eval_batch_size", "bon_questions")
        positive += ("policy_per_device_train_batch_size", "policy_heldout", "policy_samples")
        check_at_least_one(self, positive)
        if self.policy_max_steps < 0 or self.policy_sft_max_steps < 1 or self.policy_vision_warmup_steps < 1:
            raise ValueError(
                "policy_max_steps must be >= 0, policy_sft_max_steps and policy_vision_warmup_steps >= 1 "
                "(the policy must see and answer before a reward can teach it)"
            )
        if self.bon_n < 2:
            raise ValueError(f"bon_n ({self.bon_n}) must be at least 2: best-of-N chooses among N")
        check_group(self.policy_per_device_train_batch_size, self.policy_num_generations, "policy_")


RENAMED: dict[str, str] = {
    **RECIPE_RENAMED,
    "policy_sft_steps": "policy_sft_max_steps",
    "policy_grpo_steps": "policy_max_steps",
    "policy_batch_size": "policy_per_device_train_batch_size",
    "policy_generations": "policy_num_generations",
    "policy_grpo_lr": "policy_learning_rate",
}
"""Old field names (before each took TRL's name) → the new ones: still read, with a warning naming the new one."""

QUICK: dict[str, Any] = dict(
    world_n=120,
    val_fraction=0.25,
    judge_size="tiny",
    judge_max_new_tokens=24,
    vision_warmup_steps=2,
    heldout_n=8,
    untrained_heldout_n=4,
    eval_batch_size=8,
    sft_max_steps=4,
    per_device_train_batch_size=4,
    grpo_max_steps=1,
    num_generations=2,
    bon_questions=4,
    bon_n=3,
    pool_n=30,
    policy_vision_warmup_steps=2,
    policy_sft_max_steps=2,
    policy_max_steps=1,
    policy_per_device_train_batch_size=4,
    policy_num_generations=2,
    policy_max_completion_length=8,
    policy_heldout=2,
    policy_samples=2,
    policy_audit_rate=1.0,  # every group, so that one step of the quick policy stage is audited
    wall_budget_s=60.0,
)
"""The quick preset: every stage runs, on budgets that finish in well under a minute on 2 cores."""


def load_demo_config(
    path: str | Path | None = None, overrides: dict[str, Any] | None = None, *, quick: bool = False
) -> DemoConfig:
    """The defaults, the quick preset when asked (flag or `quick: true`), the YAML file, then `overrides`."""
    values = config_values(DemoConfig, path, overrides, renamed=RENAMED)
    if quick or values.get("quick"):
        values = {**QUICK, **values, "quick": True}
    try:
        return DemoConfig(**values)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{path or 'demo config'}: {exc}") from exc

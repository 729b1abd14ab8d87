"""`DemoConfig`: every budget of `mrjudge demo` in one dataclass, loadable from YAML with `key=value` overrides.

    mrjudge demo --config configs/demo.yaml sft_steps=400 grpo_steps=0
    mrjudge demo --quick                     # every stage on tiny budgets, well under a minute (tests)

Precedence: the defaults (the full demo), then the quick preset (`--quick` or `quick: true`), then the YAML
file, then the command line's `key=value` overrides.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

from judge.config import ConfigError, config_values, yaml_load
from tiny_world.recipe import TinyJudgeRecipe

__all__ = ["QUICK", "DemoConfig", "load_demo_config", "parse_overrides"]

_RECIPE_FIELDS = {f.name: f for f in fields(TinyJudgeRecipe)}


def _recipe(name: str) -> Any:
    """A field of the judge recipe, with its default and help from `TinyJudgeRecipe` (one place for both)."""
    f = _RECIPE_FIELDS[name]
    if f.default_factory is not MISSING:
        return field(default_factory=f.default_factory, metadata=f.metadata)
    return field(default=f.default, metadata=f.metadata)


@dataclass
class DemoConfig:
    """What the demo builds and how long each stage may take (in steps and items; wall time is measured)."""

    # Run
    seed: int = _recipe("seed")
    threads: int | None = field(default=None, metadata={"help": "torch threads (default: torch's choice)"})
    wall_budget_s: float = field(default=900.0, metadata={"help": "the whole demo's budget; a warning above it"})
    heldout_goal: float = field(default=0.85, metadata={"help": "held-out accuracy the summary checks against"})

    # Synthetic world and judge data (the recipe of `tiny_world.recipe.TinyJudgeRecipe`)
    kinds: list[str] = _recipe("kinds")
    world_n: int = _recipe("world_n")
    image_size: int = _recipe("image_size")
    shaded: bool = _recipe("shaded")
    negatives_n: int = _recipe("negatives_n")
    max_options: int = _recipe("max_options")
    val_fraction: float = _recipe("val_fraction")
    reasoner_style: str = _recipe("reasoner_style")
    describe_share: float = _recipe("describe_share")

    # Judge and held-out evaluation
    judge_size: str = _recipe("judge_size")
    judge_max_new_tokens: int | None = _recipe("judge_max_new_tokens")
    heldout_n: int = field(default=200, metadata={"help": "VL-RewardBench-format held-out pairs"})
    untrained_heldout_n: int = field(
        default=64,
        metadata={"help": "of those, pairs the untrained judge is scored on (it writes no answer: a baseline)"},
    )
    eval_batch_size: int = field(default=16, metadata={"help": "items per judge batch in evaluation"})

    # Perception warm-up, SFT and judge GRPO
    vision_warmup_steps: int = _recipe("vision_warmup_steps")
    train_vision: bool = _recipe("train_vision")
    vision_lr: float | None = _recipe("vision_lr")
    sft_steps: int = _recipe("sft_steps")
    sft_lr: float = _recipe("sft_lr")
    batch_size: int = _recipe("batch_size")
    grpo_steps: int = _recipe("grpo_steps")
    grpo_lr: float = _recipe("grpo_lr")
    grpo_generations: int = _recipe("grpo_generations")

    # MM-Vet-style best-of-N
    bon_questions: int = field(default=48, metadata={"help": "held-out questions for best-of-N"})
    bon_n: int = field(default=4, metadata={"help": "candidates per question (N)"})
    bon_gold_share: float = field(default=0.35, metadata={"help": "chance a candidate is the right answer"})

    # Policy GRPO against the reward server
    policy_size: str = field(default="tiny", metadata={"help": "tiny-model size of the policy"})
    policy_sft_steps: int = field(default=150, metadata={"help": "policy warm-start SFT steps"})
    policy_correct_share: float = field(
        default=0.5, metadata={"help": "share of right answers in the policy's warm-start data (the rest are wrong)"}
    )
    policy_grpo_steps: int = field(default=20, metadata={"help": "policy GRPO steps rewarded by the server"})
    policy_batch_size: int = field(default=16, metadata={"help": "policy GRPO completions per step"})
    policy_generations: int = field(default=4, metadata={"help": "completions per prompt in policy GRPO"})
    policy_max_completion_length: int = field(default=24, metadata={"help": "policy answer budget (tokens)"})
    policy_grpo_lr: float = field(default=3e-4, metadata={"help": "policy GRPO learning rate"})
    policy_beta: float = field(default=0.04, metadata={"help": "KL penalty keeping the policy near its start"})
    policy_heldout: int = field(default=16, metadata={"help": "held-out questions for reward before/after"})
    policy_samples: int = field(default=4, metadata={"help": "sampled answers per held-out question"})

    quick: bool = field(default=False, metadata={"help": "start from the quick preset (tiny budgets, for tests)"})

    def recipe(self) -> TinyJudgeRecipe:
        """The judge recipe these budgets ask for (the same one `benchmarks/learning_curve.py` runs)."""
        return TinyJudgeRecipe(**{name: getattr(self, name) for name in _RECIPE_FIELDS})

    @property
    def judge_tokens(self) -> int:
        """The judge's generation budget: `judge_max_new_tokens`, else the trace layout's."""
        return self.recipe().max_new_tokens

    def __post_init__(self) -> None:
        from data_synthesis.world import REASONER_STYLES, TASK_KINDS
        from tiny_world.model import TINY_SIZES

        if isinstance(self.kinds, str):
            self.kinds = [k.strip() for k in self.kinds.split(",") if k.strip()]
        unknown = sorted(set(self.kinds) - set(TASK_KINDS))
        if not self.kinds or unknown:
            raise ValueError(f"kinds must be some of {list(TASK_KINDS)}, got {self.kinds}")
        for name in ("judge_size", "policy_size"):
            if getattr(self, name) not in TINY_SIZES:
                raise ValueError(f"{name} must be one of {sorted(TINY_SIZES)}, got {getattr(self, name)!r}")
        if self.reasoner_style not in REASONER_STYLES:
            raise ValueError(f"reasoner_style must be one of {REASONER_STYLES}, got {self.reasoner_style!r}")
        positive = (
            "world_n",
            "heldout_n",
            "untrained_heldout_n",
            "eval_batch_size",
            "sft_steps",
            "batch_size",
            "bon_questions",
        )
        positive += ("policy_batch_size", "policy_heldout", "policy_samples")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} ({getattr(self, name)}) must be at least 1")
        if self.judge_max_new_tokens is not None and self.judge_max_new_tokens < 1:
            raise ValueError(f"judge_max_new_tokens ({self.judge_max_new_tokens}) must be at least 1, or null")
        if self.vision_warmup_steps < 0:
            raise ValueError(f"vision_warmup_steps ({self.vision_warmup_steps}) must be >= 0 (0: no warm-up)")
        if self.grpo_steps < 0 or self.policy_grpo_steps < 0 or self.policy_sft_steps < 0:
            raise ValueError("grpo_steps, policy_sft_steps and policy_grpo_steps must be >= 0")
        if self.bon_n < 2:
            raise ValueError(f"bon_n ({self.bon_n}) must be at least 2: best-of-N chooses among N")
        for name, generations, batch in (
            ("", self.grpo_generations, self.batch_size),
            ("policy_", self.policy_generations, self.policy_batch_size),
        ):
            if generations < 2 or batch % generations:
                raise ValueError(
                    f"{name}batch_size ({batch}) must be a multiple of {name or 'grpo_'}generations ({generations}), "
                    "which must be at least 2 (GRPO compares completions of one prompt)"
                )
        if not 0 < self.val_fraction < 1:
            raise ValueError(f"val_fraction ({self.val_fraction}) must be in (0, 1)")


QUICK: dict[str, Any] = dict(
    world_n=120,
    val_fraction=0.25,
    judge_size="tiny",
    judge_max_new_tokens=24,
    vision_warmup_steps=2,
    heldout_n=8,
    untrained_heldout_n=4,
    eval_batch_size=8,
    sft_steps=4,
    batch_size=4,
    grpo_steps=1,
    grpo_generations=2,
    bon_questions=4,
    bon_n=3,
    policy_sft_steps=2,
    policy_grpo_steps=1,
    policy_batch_size=4,
    policy_generations=2,
    policy_max_completion_length=8,
    policy_heldout=2,
    policy_samples=2,
    wall_budget_s=60.0,
)
"""The quick preset: every stage runs, on budgets that finish in well under a minute on 2 cores."""


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """`["sft_steps=400", "kinds=[count]"]` → `{"sft_steps": 400, "kinds": ["count"]}` (values read as YAML)."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"override {pair!r} must look like key=value (e.g. sft_steps=400)")
        out[key.strip()] = yaml_load(value)
    return out


def load_demo_config(
    path: str | Path | None = None, overrides: dict[str, Any] | None = None, *, quick: bool = False
) -> DemoConfig:
    """The defaults, the quick preset when asked (flag or `quick: true`), the YAML file, then `overrides`."""
    values = config_values(DemoConfig, path, overrides)
    if quick or values.get("quick"):
        values = {**QUICK, **values, "quick": True}
    try:
        return DemoConfig(**values)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{path or 'demo config'}: {exc}") from exc

"""`TinyJudgeRecipe`: every choice of the recipe in one dataclass, with its checks, and its steps: each a
call into `data` or `trainers` with the recipe's choices filled in."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from judge.config import check_at_least_one, setting
from tiny_world.recipe.data import check_traces, distill_judge_data, warmup_rows, write_kind_world
from tiny_world.recipe.trainers import check_group, grpo_config, recipe_judge, sft_config

__all__ = ["RENAMED", "TRACE_TOKENS", "TinyJudgeRecipe"]

TRACE_TOKENS: dict[str, int] = {"pairs": 256, "scene": 128, "checks": 192}
"""Judge and GRPO generation budgets for trace layouts longer than the default 96 tokens (the longest trace fits)."""

RENAMED: dict[str, str] = {
    "vision_lr": "vision_learning_rate",
    "sft_steps": "sft_max_steps",
    "sft_lr": "sft_learning_rate",
    "batch_size": "per_device_train_batch_size",
    "grpo_steps": "grpo_max_steps",
    "grpo_lr": "grpo_learning_rate",
    "grpo_generations": "num_generations",
}
"""The recipe's old field names (before each took TRL's name) → the new ones; configs may still use them."""


@dataclass
class TinyJudgeRecipe:
    """Every choice of the recipe that teaches a tiny judge, with the defaults measured in docs/learning.md
    (0.85 held-out over attribute, count and spatial questions in about 690 s on 2 cores)."""

    kinds: list[str] = setting(
        help="world question kinds the judge learns (ocr and arithmetic are harder)",
        factory=lambda: ["attribute", "count", "spatial"],
    )
    world_n: int = setting(4000, "world records of those kinds")
    image_size: int = setting(84, "picture side in px (84 px → 9 image tokens)")
    shaded: bool = setting(True, "each grid cell on its own pale background, so positions show in the pixels")
    negatives_n: int = setting(3, "exact negatives per record")
    max_options: int = setting(2, "options per MC item (the tiny judge learns pairs)")
    val_fraction: float = setting(0.08, "share of records held out (validation split)")
    reasoner_style: str = setting(
        "checks", "trace layout: checks (image facts keyed by shape, then each option checked fact by fact)"
    )
    describe_share: float = setting(0.0, "share of SFT examples asking for a description")
    traces: str = setting(
        "exact",
        "SFT traces: exact (the scene reasoner's) or distilled (the paper's: described with errors, "
        "reasoned from the description with a hint, filtered)",
    )
    describe_error_rate: float = setting(
        0.0, "distilled traces: the describer's per-fact error rate (0: exact descriptions)"
    )
    reasoner_hint: str = setting(
        "lean",
        "distilled traces: where the text reasoner's reading matches no option or lacks the asked object, lean "
        "on the hint, or ignore it (the closest option, or no answer; the filter drops what is not the label)",
    )
    judge_size: str = setting("small", "tiny-model size of the judge")
    judge_max_new_tokens: int | None = setting(
        None, "judge reasoning budget in tokens (default: the trace layout's, TRACE_TOKENS)"
    )
    vision_warmup_steps: int = setting(1500, "perception warm-up steps before SFT, then the tower is frozen; 0: none")
    train_vision: bool = setting(False, "train the vision tower in SFT and GRPO too (default: frozen after a warm-up)")
    vision_learning_rate: float | None = setting(None, "vision tower learning rate in SFT (default: sft_learning_rate)")
    sft_max_steps: int = setting(1500, "warm-up SFT optimizer steps (SFT's max_steps)")
    sft_learning_rate: float = setting(1e-3, "SFT learning rate (warmup-stable-decay; SFT's learning_rate)")
    per_device_train_batch_size: int = setting(16, "SFT and judge-GRPO batch")
    pool_n: int = setting(
        400, "fresh world records drawn for judge GRPO's own pool (filtered by the SFT judge; 0: none)"
    )
    grpo_max_steps: int = setting(100, "judge GRPO steps (GRPO's max_steps; 0 skips GRPO)")
    grpo_learning_rate: float = setting(3e-5, "judge GRPO learning rate (GRPO's learning_rate)")
    grpo_beta: float = setting(0.02, "judge GRPO's KL coefficient (GRPO's beta)")
    grpo_loss_type: str = setting("grpo", "judge GRPO's loss_type (the paper describes GRPO)")
    grpo_warmup_steps: float = setting(
        0.1, "judge GRPO lr warm-up: steps, or a share of max_steps below 1 (warmup_steps)"
    )
    grpo_temperature: float = setting(0.7, "judge GRPO's sampling temperature (temperature)")
    num_generations: int = setting(8, "completions per prompt in judge GRPO (the group size)")
    seed: int = setting(0, "seeds the world, the judge, the splits and the trainers")

    def __post_init__(self) -> None:
        from data_synthesis.world import REASONER_STYLES, TASK_KINDS
        from tiny_world.model import TINY_SIZES

        if isinstance(self.kinds, str):
            self.kinds = [k.strip() for k in self.kinds.split(",") if k.strip()]
        unknown = sorted(set(self.kinds) - set(TASK_KINDS))
        if not self.kinds or unknown:
            raise ValueError(f"kinds must be some of {list(TASK_KINDS)}, got {self.kinds}")
        if self.judge_size not in TINY_SIZES:
            raise ValueError(f"judge_size must be one of {sorted(TINY_SIZES)}, got {self.judge_size!r}")
        if self.reasoner_style not in REASONER_STYLES:
            raise ValueError(f"reasoner_style must be one of {REASONER_STYLES}, got {self.reasoner_style!r}")
        check_at_least_one(self, ("world_n", "sft_max_steps", "per_device_train_batch_size"))
        if self.judge_max_new_tokens is not None and self.judge_max_new_tokens < 1:
            raise ValueError(f"judge_max_new_tokens ({self.judge_max_new_tokens}) must be at least 1, or null")
        if self.vision_warmup_steps < 0:
            raise ValueError(f"vision_warmup_steps ({self.vision_warmup_steps}) must be >= 0 (0: no warm-up)")
        if self.grpo_max_steps < 0:
            raise ValueError(f"grpo_max_steps ({self.grpo_max_steps}) must be >= 0 (0: no GRPO)")
        if self.pool_n < 0:
            raise ValueError(f"pool_n ({self.pool_n}) must be >= 0 (0: judge GRPO trains on the SFT items)")
        if self.grpo_beta < 0 or self.grpo_temperature <= 0:
            raise ValueError(f"grpo_beta ({self.grpo_beta}) must be >= 0 and grpo_temperature > 0")
        check_group(self.per_device_train_batch_size, self.num_generations)
        check_traces(self.traces, self.describe_error_rate, self.reasoner_hint)
        if not 0 < self.val_fraction < 1:
            raise ValueError(f"val_fraction ({self.val_fraction}) must be in (0, 1)")

    @property
    def max_new_tokens(self) -> int:
        """The judge's generation budget: `judge_max_new_tokens`, else the longest trace of the layout."""
        return self.judge_max_new_tokens or TRACE_TOKENS.get(self.reasoner_style, 96)

    @property
    def freeze_vision(self) -> bool:
        """The tower stays fixed in SFT and GRPO after a warm-up (as the 7B recipes freeze theirs)."""
        return self.vision_warmup_steps > 0 and not self.train_vision

    def write_world(
        self, world_dir: str | Path, data_dir: str | Path, progress: Callable[[int], None] | None = None
    ) -> list[dict[str, Any]]:
        """The synthetic world, kept to the recipe's kinds (`write_kind_world`)."""
        return write_kind_world(
            world_dir,
            data_dir,
            kinds=self.kinds,
            n=self.world_n,
            seed=self.seed,
            image_size=self.image_size,
            shaded=self.shaded,
            progress=progress,
        )

    def write_negatives(self, data_dir: str | Path, out_dir: str | Path, *, show_progress: bool = False) -> dict:
        """Exact negatives by perturbing each record's scene; returns the negatives stage's summary."""
        from data_synthesis.pipeline import run_negatives

        _, summary = run_negatives(
            data_dir, out_dir, generator="scene", n=self.negatives_n, seed=self.seed, show_progress=show_progress
        )
        return summary

    def distill(self, negatives_dir: str | Path, out_dir: str | Path, *, show_progress: bool = False) -> dict:
        """Descriptions → balanced MC items → the recipe's traces → SFT examples (`distill_judge_data`)."""
        return distill_judge_data(
            negatives_dir,
            out_dir,
            max_options=self.max_options,
            val_fraction=self.val_fraction,
            reasoner_style=self.reasoner_style,
            describe_share=self.describe_share,
            traces=self.traces,
            describe_error_rate=self.describe_error_rate,
            reasoner_hint=self.reasoner_hint,
            seed=self.seed,
            show_progress=show_progress,
        )

    def warm_up(
        self,
        model_dir: str | Path,
        records_dir: str | Path,
        items_dir: str | Path,
        out_dir: str | Path,
        progress: Callable[[int, dict[str, float]], None] | None = None,
    ) -> dict[str, Any]:
        """The perception warm-up on training-split pictures; `model` is the judge SFT starts from (the
        warmed-up one, or `model_dir` itself when `vision_warmup_steps` is 0) and `frozen` whether SFT and
        GRPO keep its vision tower fixed."""
        if not self.vision_warmup_steps:
            return {"steps": 0, "wall_s": 0.0, "model": str(model_dir), "frozen": False}
        from tiny_world.vision_warmup import VisionWarmupConfig, warm_up_vision

        figures = warm_up_vision(
            model_dir,
            warmup_rows(records_dir, items_dir),
            image_root=records_dir,
            out_dir=out_dir,
            # On a shaded world the warm-up also teaches where each token is (its cell shows in the pixels).
            config=VisionWarmupConfig(steps=self.vision_warmup_steps, seed=self.seed, cell_head=self.shaded),
            progress=progress,
        )
        return {**figures, "model": str(out_dir), "frozen": self.freeze_vision}

    def trainer_fields(self, stage: str) -> dict[str, Any]:
        """The fields the recipe sets on `stage`'s trainer (sft or grpo), each under its TRL name: the recipe's
        `<stage>_max_steps` is that trainer's `max_steps`, and so on."""
        fields: dict[str, Any] = dict(
            max_steps=getattr(self, f"{stage}_max_steps"),
            learning_rate=getattr(self, f"{stage}_learning_rate"),
            per_device_train_batch_size=self.per_device_train_batch_size,
            seed=self.seed,
            freeze_vision=self.freeze_vision,
        )
        if stage == "sft":
            fields["vision_learning_rate"] = self.vision_learning_rate
        else:
            fields.update(
                num_generations=self.num_generations,
                max_completion_length=self.max_new_tokens,
                beta=self.grpo_beta,
                loss_type=self.grpo_loss_type,
                warmup_steps=self.grpo_warmup_steps,
                temperature=self.grpo_temperature,
            )
        return fields

    def sft_config(self, model: str | Path, train_file: str | Path, output_dir: str | Path, **fields: Any) -> Any:
        """The recipe's warm-up SFT (`sft_config`) from `model`, the warmed-up judge; `fields` win."""
        return sft_config(model, train_file, output_dir, **{**self.trainer_fields("sft"), **fields})

    def grpo_config(self, model: str | Path, train_file: str | Path, output_dir: str | Path, **fields: Any) -> Any:
        """The recipe's judge GRPO (`grpo_config`) from the SFT judge `model`; `fields` win."""
        return grpo_config(model, train_file, output_dir, **{**self.trainer_fields("grpo"), **fields})

    def judge(self, model_dir: str | Path, *, image_root: str | Path | None, batch_size: int, **sampling: Any) -> Any:
        """The recipe's judge (`recipe_judge`) with the layout's generation budget; `sampling`: its `samples`
        and `temperature` (default greedy)."""
        return recipe_judge(
            model_dir, image_root=image_root, batch_size=batch_size, max_new_tokens=self.max_new_tokens, **sampling
        )

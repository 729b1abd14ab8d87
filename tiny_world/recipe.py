"""The recipe that teaches a tiny judge on a CPU: the data it sees, its prompt, its warm-up, SFT and GRPO.

`benchmarks/learning_curve.py` measures this recipe; `mrjudge demo` runs it end to end. Both take it from
here (`TinyJudgeRecipe`, its defaults and its steps), so the demo's judge is trained exactly the way the
benchmark's numbers were made (docs/learning.md):

- a `small` judge from the tiny-model factory, on synthetic-world questions of a few kinds (attribute,
  count and spatial by default), 84 px pictures (9 image tokens), each grid cell on its own pale
  background (`shaded`), so positions show in the pixels;
- the compact judge prompt (`COMPACT_PROMPT`): the model is tiny and the CPU slow, so every prompt token
  costs steps;
- a perception warm-up of the vision tower (`tiny_world.vision_warmup`), which is then frozen;
- `checks` scene-reasoner traces: the picture's facts keyed by shape, then every option checked fact by fact;
- TRL SFT at lr 1e-3 with warmup-stable-decay, batch 16, no gradient checkpointing; then a short GRPO.

    from tiny_world.recipe import TinyJudgeRecipe
    recipe = TinyJudgeRecipe(sft_max_steps=400)

Each setting has one name from the YAML to TRL: a field that a trainer reads is named as TRL names it
(`num_generations`, `per_device_train_batch_size`), with its stage in front where SFT and GRPO each have
one (`sft_max_steps` → SFT's `max_steps`, `grpo_learning_rate` → GRPO's `learning_rate`). `RENAMED` keeps
the old names readable, with a warning.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from judge.prompt import COMPACT_PROMPT

__all__ = [
    "COMPACT_PROMPT",
    "DESCRIBE_PROMPT",
    "History",
    "RENAMED",
    "TRACE_TOKENS",
    "TRAINER_DEFAULTS",
    "TinyJudgeRecipe",
    "check_group",
    "distill_judge_data",
    "grpo_config",
    "recipe_judge",
    "sft_config",
    "vision_sensitivity",
    "warmup_rows",
    "world_size_for",
    "write_kind_world",
]

DESCRIBE_PROMPT = "Describe the image."
"""The short request of the recipe's image → description examples (the describe stage's own prompt is long)."""

TRAINER_DEFAULTS: dict[str, Any] = dict(
    use_cpu=True,
    bf16=False,
    report_to="none",
    save_strategy="no",
    dataloader_num_workers=0,
    # TRL switches checkpointing on by default; on a model this small it only buys recompute time.
    gradient_checkpointing=False,
)
"""TRL/`TrainingArguments` settings every CPU run of the recipe shares."""

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


def _help(text: str) -> dict[str, str]:
    return {"help": text}


@dataclass
class TinyJudgeRecipe:
    """Every choice of the recipe that teaches a tiny judge, with the defaults measured in docs/learning.md
    (0.85 held-out over attribute, count and spatial questions in about 690 s on 2 cores)."""

    kinds: list[str] = field(
        default_factory=lambda: ["attribute", "count", "spatial"],
        metadata=_help("world question kinds the judge learns (ocr and arithmetic are harder)"),
    )
    world_n: int = field(default=4000, metadata=_help("world records of those kinds"))
    image_size: int = field(default=84, metadata=_help("picture side in px (84 px → 9 image tokens)"))
    shaded: bool = field(
        default=True, metadata=_help("each grid cell on its own pale background, so positions show in the pixels")
    )
    negatives_n: int = field(default=3, metadata=_help("exact negatives per record"))
    max_options: int = field(default=2, metadata=_help("options per MC item (the tiny judge learns pairs)"))
    val_fraction: float = field(default=0.08, metadata=_help("share of records held out (validation split)"))
    reasoner_style: str = field(
        default="checks",
        metadata=_help("trace layout: checks (image facts keyed by shape, then each option checked fact by fact)"),
    )
    describe_share: float = field(default=0.0, metadata=_help("share of SFT examples asking for a description"))
    judge_size: str = field(default="small", metadata=_help("tiny-model size of the judge"))
    judge_max_new_tokens: int | None = field(
        default=None, metadata=_help("judge reasoning budget in tokens (default: the trace layout's, TRACE_TOKENS)")
    )
    vision_warmup_steps: int = field(
        default=1500, metadata=_help("perception warm-up steps before SFT, then the tower is frozen; 0: none")
    )
    train_vision: bool = field(
        default=False, metadata=_help("train the vision tower in SFT and GRPO too (default: frozen after a warm-up)")
    )
    vision_learning_rate: float | None = field(
        default=None, metadata=_help("vision tower learning rate in SFT (default: sft_learning_rate)")
    )
    sft_max_steps: int = field(default=1500, metadata=_help("warm-up SFT optimizer steps (SFT's max_steps)"))
    sft_learning_rate: float = field(
        default=1e-3, metadata=_help("SFT learning rate (warmup-stable-decay; SFT's learning_rate)")
    )
    per_device_train_batch_size: int = field(default=16, metadata=_help("SFT and judge-GRPO batch"))
    pool_n: int = field(
        default=400,
        metadata=_help("fresh world records drawn for judge GRPO's own pool (filtered by the SFT judge; 0: none)"),
    )
    grpo_max_steps: int = field(default=100, metadata=_help("judge GRPO steps (GRPO's max_steps; 0 skips GRPO)"))
    grpo_learning_rate: float = field(default=3e-5, metadata=_help("judge GRPO learning rate (GRPO's learning_rate)"))
    grpo_beta: float = field(default=0.02, metadata=_help("judge GRPO's KL coefficient (GRPO's beta)"))
    grpo_loss_type: str = field(default="grpo", metadata=_help("judge GRPO's loss_type (the paper describes GRPO)"))
    grpo_warmup_steps: float = field(
        default=0.1, metadata=_help("judge GRPO lr warm-up: steps, or a share of max_steps below 1 (warmup_steps)")
    )
    grpo_temperature: float = field(default=0.7, metadata=_help("judge GRPO's sampling temperature (temperature)"))
    num_generations: int = field(default=8, metadata=_help("completions per prompt in judge GRPO (the group size)"))
    seed: int = field(default=0, metadata=_help("seeds the world, the judge, the splits and the trainers"))

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
        for name in ("world_n", "sft_max_steps", "per_device_train_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} ({getattr(self, name)}) must be at least 1")
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

    def judge(self, model_dir: str | Path, *, image_root: str | Path | None, batch_size: int) -> Any:
        """The recipe's judge (`recipe_judge`) with the layout's generation budget."""
        return recipe_judge(model_dir, image_root=image_root, batch_size=batch_size, max_new_tokens=self.max_new_tokens)


# -- data --------------------------------------------------------------------------------------------------


def world_size_for(n: int, kinds: Iterable[str]) -> int:
    """World items to draw for about `n` records of `kinds`: the world draws its five kinds evenly."""
    return n * 5 // len(set(kinds)) + 5


def write_kind_world(
    world_dir: str | Path,
    data_dir: str | Path,
    *,
    kinds: Iterable[str],
    n: int,
    seed: int,
    image_size: int = 84,
    shaded: bool = False,
    progress: Callable[[int], None] | None = None,
) -> list[dict[str, Any]]:
    """Draw the synthetic world into `world_dir` and keep about `n` records of the given question `kinds`.

    `world_size_for(n, kinds)` items are drawn (`progress` is called with the count written so far);
    `shaded` draws each grid cell on its own background (`data_synthesis.world.Scene.shaded`).
    `data_dir` gets `records.jsonl` and `scenes.jsonl` of the kept records (image paths relative to it),
    ready for `data_synthesis.pipeline.run_negatives`. Returns the kept rows.
    """
    from data_synthesis.pipeline import load_rows
    from data_synthesis.world import write_world
    from jobs.jsonl import write_jsonl_atomic

    kinds = set(kinds)
    world_dir, data_dir = Path(world_dir), Path(data_dir)
    write_world(world_size_for(n, kinds), seed, world_dir, size=image_size, shaded=shaded, progress=progress)
    rows = [r for r in load_rows(world_dir, "records", data_dir) if r["source"].split("/")[1] in kinds]
    fields = ("id", "image", "question", "answer", "source")
    write_jsonl_atomic(data_dir / "records.jsonl", [{k: r[k] for k in fields} for r in rows])
    write_jsonl_atomic(data_dir / "scenes.jsonl", [{"id": r["id"], **r["world"]} for r in rows])
    return rows


def distill_judge_data(
    input_dir: str | Path,
    out_dir: str | Path,
    *,
    max_options: int = 2,
    val_fraction: float = 0.08,
    reasoner_style: str = "diff",
    describe_share: float = 0.0,
    seed: int = 0,
    show_progress: bool = False,
) -> dict[str, Any]:
    """Negatives in `input_dir` → descriptions → balanced MC items → distilled traces → SFT examples in `out_dir`.

    The SFT examples are worded with `COMPACT_PROMPT`; `describe_share` of the training file are image →
    description examples (asked with `DESCRIBE_PROMPT`). Returns the item count, the kept fraction of
    traces, the example counts, and the assembly and distillation summaries.
    """
    from data_synthesis.assemble import AssembleConfig
    from data_synthesis.pipeline import run_assemble, run_describe, run_distill, write_sft_examples

    described, _ = run_describe(input_dir, out_dir, describer="scene", show_progress=show_progress)
    items, assembled = run_assemble(
        out_dir, out_dir, AssembleConfig(max_options=max_options, val_fraction=val_fraction, seed=seed)
    )
    distilled, summary = run_distill(
        out_dir, out_dir, reasoner="scene", reasoner_style=reasoner_style, show_progress=show_progress
    )
    counts = write_sft_examples(
        items,
        distilled,
        Path(out_dir),
        prompt=COMPACT_PROMPT,
        described=described,
        describe_share=describe_share,
        describe_instruction=DESCRIBE_PROMPT,
    )
    return {
        "items": len(items),
        "kept_fraction": summary["kept_fraction"],
        **counts,
        "assembled": assembled,
        "distilled": summary,
    }


def warmup_rows(data_dir: str | Path, items_dir: str | Path | None = None) -> list[dict[str, Any]]:
    """World records in `data_dir` of the training split (`items.jsonl` in `items_dir`, default `data_dir`),
    with their scenes, for `tiny_world.vision_warmup` (held-out pictures stay unseen); image paths are
    relative to `data_dir`."""
    from data_synthesis.pipeline import load_rows
    from jobs.jsonl import read_jsonl

    data_dir = Path(data_dir)
    items = Path(items_dir or data_dir) / "items.jsonl"
    train = {item["id"] for _, item in read_jsonl(items) if item["meta"]["split"] == "train"}
    return [row for row in load_rows(data_dir, "records", data_dir) if row["id"] in train]


# -- judge and trainers ------------------------------------------------------------------------------------


def recipe_judge(
    model_dir: str | Path, *, image_root: str | Path | None, batch_size: int, max_new_tokens: int = 96
) -> Any:
    """The recipe's judge on a CPU: both display orders, greedy, `COMPACT_PROMPT`, one backend call per batch."""
    from judge.backends.hf import TransformersBackend
    from judge.judging import Judge, JudgeConfig

    return Judge(
        TransformersBackend(str(model_dir), device="cpu", max_batch_size=2 * batch_size),
        JudgeConfig(orders=2, max_new_tokens=max_new_tokens, batch_size=batch_size, prompt=COMPACT_PROMPT),
        image_root=image_root,
    )


def check_group(batch_size: int, num_generations: int, prefix: str = "") -> None:
    """GRPO's rule, checked before any work: the batch is whole groups of at least 2 completions of a prompt."""
    if num_generations < 2 or batch_size % num_generations:
        raise ValueError(
            f"{prefix}per_device_train_batch_size ({batch_size}) must be a multiple of {prefix}num_generations "
            f"({num_generations}), which must be at least 2 (GRPO compares completions of one prompt)"
        )


def _trainer_config(cls: type, model: str | Path, train_file: str | Path, output_dir: str | Path, **fields: Any) -> Any:
    return cls(
        model_name_or_path=str(model),
        train_file=str(train_file),
        output_dir=str(output_dir),
        **{**TRAINER_DEFAULTS, **fields},
    )


def sft_config(
    model: str | Path,
    train_file: str | Path,
    output_dir: str | Path,
    *,
    max_steps: int,
    warmup_fraction: float = 0.03,
    **fields: Any,
) -> Any:
    """The warm-up SFT: lr held for 70 % of the steps after a short warm-up, then decayed (warmup_stable_decay).

    `fields` are `JudgeSFTConfig` fields; they win over the recipe's (batch 16, lr 3e-3, seed 0, `TRAINER_DEFAULTS`).
    """
    from training.sft import JudgeSFTConfig

    recipe = dict(
        max_steps=max_steps,
        per_device_train_batch_size=16,
        learning_rate=3e-3,
        lr_scheduler_type="warmup_stable_decay",
        lr_scheduler_kwargs={"num_decay_steps": int(0.3 * max_steps)},
        warmup_steps=int(warmup_fraction * max_steps),
        weight_decay=0.0,
        max_length=None,
        logging_steps=10,
        seed=0,
    )
    return _trainer_config(JudgeSFTConfig, model, train_file, output_dir, **{**recipe, **fields})


def grpo_config(
    model: str | Path, train_file: str | Path, output_dir: str | Path, *, max_steps: int, **fields: Any
) -> Any:
    """The judge GRPO after SFT: TRL's `grpo` loss with a small KL term, a short lr warm-up, sampled at
    temperature 0.7 (at 1.0 the tiny judge's image line is mostly noise, and the letter reward then pays for
    right answers reached from misread pictures: docs/learning.md, "RL that teaches"), the SFT data's wording.

    `fields` are `JudgeGRPOConfig` fields; they win over the recipe's (batch 16, 8 completions of at most 96
    tokens, lr 3e-5, beta 0.02, seed 0, `TRAINER_DEFAULTS`).
    """
    from training.grpo import JudgeGRPOConfig

    recipe = dict(
        max_steps=max_steps,
        per_device_train_batch_size=16,
        num_generations=8,
        max_completion_length=96,
        learning_rate=3e-5,
        loss_type="grpo",
        beta=0.02,
        warmup_steps=0.1,
        temperature=0.7,
        prompt_instruction=COMPACT_PROMPT.instruction,  # the wording the SFT data used
        prompt_criteria="",
        prompt_answer_format=COMPACT_PROMPT.answer_format,
        logging_steps=2,
        seed=0,
    )
    return _trainer_config(JudgeGRPOConfig, model, train_file, output_dir, **{**recipe, **fields})


# -- diagnostics -------------------------------------------------------------------------------------------


def vision_sensitivity(model_dir: str | Path, *, image_size: int = 84, shaded: bool = False) -> dict[str, float]:
    """How much the judge's image features move when one shape changes colour, kind or size.

    A one-shape picture and three variants of it; each figure is the relative change of the image token
    that covers the shape (`|f' - f| / |f|`). A randomly built judge moves by 0.5–0.85; a vision tower
    whose features have collapsed to a constant (they stop depending on the picture) moves by ~0, and
    its judge can then only decide flaws that the text alone gives away. `shaded`: pictures drawn as a
    shaded world draws them (`Scene.shaded`).
    """
    import torch
    from transformers import AutoModelForImageTextToText

    import judge.backends.hf_compat  # noqa: F401  (the image-only processor where torchvision does not import)
    from data_synthesis.world import Scene, Shape, render
    from judge.models import load_processor
    from tiny_world.vision_warmup import image_token_features

    processor = load_processor(str(model_dir), is_vlm=True)
    model = AutoModelForImageTextToText.from_pretrained(str(model_dir)).eval()
    centre = image_size // 6  # the top-left cell of the 3x3 grid

    def features(kind: str, colour: str, size: str) -> Any:
        picture = render(Scene(image_size, image_size, [Shape(kind, colour, size, centre, centre)], shaded=shaded))
        with torch.no_grad():
            return image_token_features(model, processor, [picture])[0][0]

    base = features("circle", "red", "large")
    variants = {
        "colour": ("circle", "blue", "large"),
        "kind": ("square", "red", "large"),
        "size": ("circle", "red", "small"),
    }
    return {name: round(float((features(*v) - base).norm() / base.norm()), 4) for name, v in variants.items()}


# -- training logs ----------------------------------------------------------------------------------------


class History:
    """A TrainerCallback-like recorder of logged losses and rewards, for the curves."""

    def __init__(self) -> None:
        self.logs: list[dict[str, float]] = []

    def callback(self) -> Any:
        from transformers import TrainerCallback

        history = self

        class Record(TrainerCallback):
            def on_log(self, args, state, control, logs=None, **kwargs):
                if logs:
                    history.logs.append(
                        {"step": state.global_step, **{k: v for k, v in logs.items() if isinstance(v, (int, float))}}
                    )

        return Record()

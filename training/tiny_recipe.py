"""The recipe that teaches a tiny judge on a CPU: the data it sees, its prompt, its SFT and GRPO settings.

`benchmarks/learning_curve.py` measures this recipe; `mrjudge demo` runs it end to end. Both take it from
here, so the demo's judge is trained exactly the way the benchmark's numbers were made:

- a `small` judge from the tiny-model factory, on synthetic-world questions of a few kinds (attribute,
  count and spatial by default), 84 px pictures (9 image tokens);
- the compact judge prompt (`COMPACT_PROMPT`): the model is tiny and the CPU slow, so every prompt token
  costs steps;
- `diff` scene-reasoner traces that give a verdict per option;
- TRL SFT at lr 3e-3 with warmup-stable-decay, batch 16, no gradient checkpointing; then a short GRPO.

    from training.tiny_recipe import COMPACT_PROMPT, sft_config, write_kind_world
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from judge.prompt import COMPACT_PROMPT

__all__ = [
    "COMPACT_PROMPT",
    "DESCRIBE_PROMPT",
    "History",
    "TRAINER_DEFAULTS",
    "distill_judge_data",
    "grpo_config",
    "heldout_pairs",
    "plot_curves",
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
    from judge.jsonl import write_jsonl_atomic

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


def heldout_pairs(world: Path, n: int, seed: int) -> list[Any]:
    """Pairwise items (reference vs one negative) from validation-split records only.

    Each item's `meta` carries the question kind and the negative's flaw; the reference's display position
    is a seeded coin, so `label` is 0 or 1 about equally often.
    """
    from judge.jsonl import read_jsonl
    from judge.types import MCItem

    rng = random.Random(seed)
    items = []
    for _, item in read_jsonl(Path(world) / "items.jsonl"):
        if item["meta"]["split"] != "val":
            continue
        label = item["label"]
        wrong = rng.choice([i for i in range(len(item["candidates"])) if i != label])
        pair = [item["candidates"][label], item["candidates"][wrong]]
        first = rng.randrange(2)
        candidates = pair if first == 0 else pair[::-1]
        items.append(
            MCItem(
                id=item["id"],
                image=item["image"],
                question=item["question"],
                candidates=candidates,
                label=0 if first == 0 else 1,
                meta={"kind": item["meta"]["source"].split("/")[1], "flaw": item["meta"]["flaws"][wrong]},
            )
        )
    return items[:n]


def warmup_rows(data_dir: str | Path) -> list[dict[str, Any]]:
    """World records of the training split, with their scenes, for `training.vision_warmup` (held-out
    pictures stay unseen); image paths are relative to `data_dir`."""
    from data_synthesis.pipeline import load_rows
    from judge.jsonl import read_jsonl

    data_dir = Path(data_dir)
    train = {item["id"] for _, item in read_jsonl(data_dir / "items.jsonl") if item["meta"]["split"] == "train"}
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


def sft_config(
    model: str | Path,
    train_file: str | Path,
    output_dir: str | Path,
    *,
    steps: int,
    batch_size: int = 16,
    learning_rate: float = 3e-3,
    seed: int = 0,
    warmup_fraction: float = 0.03,
    **overrides: Any,
) -> Any:
    """The warm-up SFT: lr held for 70 % of the steps after a short warm-up, then decayed (warmup_stable_decay).

    `overrides` are any other `JudgeSFTConfig` fields (they replace `TRAINER_DEFAULTS` too).
    """
    from training.sft import JudgeSFTConfig

    values = dict(
        model_name_or_path=str(model),
        train_file=str(train_file),
        output_dir=str(output_dir),
        max_steps=steps,
        per_device_train_batch_size=batch_size,
        learning_rate=learning_rate,
        lr_scheduler_type="warmup_stable_decay",
        lr_scheduler_kwargs={"num_decay_steps": int(0.3 * steps)},
        warmup_steps=int(warmup_fraction * steps),
        weight_decay=0.0,
        max_length=None,
        logging_steps=10,
        seed=seed,
        **TRAINER_DEFAULTS,
    )
    values.update(overrides)
    return JudgeSFTConfig(**values)


def grpo_config(
    model: str | Path,
    train_file: str | Path,
    output_dir: str | Path,
    *,
    steps: int,
    batch_size: int = 16,
    learning_rate: float = 5e-5,
    num_generations: int = 4,
    max_completion_length: int = 96,
    seed: int = 0,
    **overrides: Any,
) -> Any:
    """The judge GRPO after SFT: sampled at temperature 1, no KL term, the SFT data's prompt wording."""
    from training.grpo import JudgeGRPOConfig

    values = dict(
        model_name_or_path=str(model),
        train_file=str(train_file),
        output_dir=str(output_dir),
        max_steps=steps,
        per_device_train_batch_size=batch_size,
        num_generations=num_generations,
        max_completion_length=max_completion_length,
        learning_rate=learning_rate,
        temperature=1.0,
        beta=0.0,
        prompt_instruction=COMPACT_PROMPT.instruction,  # the wording the SFT data used
        prompt_criteria="",
        prompt_answer_format=COMPACT_PROMPT.answer_format,
        logging_steps=2,
        seed=seed,
        **TRAINER_DEFAULTS,
    )
    values.update(overrides)
    return JudgeGRPOConfig(**values)


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

    import judge.hf_compat  # noqa: F401  (the image-only processor where torchvision does not import)
    from data_synthesis.world import Scene, Shape, render
    from judge.models import load_processor
    from training.vision_warmup import image_token_features

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


# -- curves ------------------------------------------------------------------------------------------------


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


def plot_curves(
    path: str | Path, *, sft: Sequence[dict[str, Any]] | None = None, grpo: Sequence[dict[str, Any]] | None = None
) -> Path:
    """SFT loss (log scale) and/or GRPO mean reward per step, side by side, from `History.logs`-style rows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [name for name, logs in (("sft", sft), ("grpo", grpo)) if logs is not None]
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4), squeeze=False)
    for ax, name in zip(axes[0], panels):
        if name == "sft":
            points = [(r["step"], r["loss"]) for r in sft or () if "loss" in r]
            ax.set_xlabel("SFT step"), ax.set_ylabel("loss"), ax.set_yscale("log")
            if points:
                ax.plot(*zip(*points), label="SFT loss"), ax.legend()
        else:
            points = [(r["step"], r["reward"]) for r in grpo or () if "reward" in r]
            ax.set_xlabel("GRPO step"), ax.set_ylabel("reward"), ax.set_ylim(0, 1)
            if points:
                ax.plot(*zip(*points), label="GRPO mean reward"), ax.legend()
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path

"""The recipe's data: the synthetic world kept to a few question kinds, the distilled SFT examples worded
with the compact prompt, and the training-split pictures the perception warm-up sees."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from judge.prompt import COMPACT_PROMPT

__all__ = [
    "DESCRIBE_PROMPT",
    "TRACES",
    "check_traces",
    "distill_judge_data",
    "warmup_rows",
    "world_size_for",
    "write_kind_world",
]

DESCRIBE_PROMPT = "Describe the image."
"""The short request of the recipe's image → description examples (the describe stage's own prompt is long)."""


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
    traces: str = "exact",
    describe_error_rate: float = 0.0,
    reasoner_hint: str = "lean",
    seed: int = 0,
    show_progress: bool = False,
) -> dict[str, Any]:
    """Negatives in `input_dir` → descriptions → balanced MC items → distilled traces → SFT examples in `out_dir`.

    `traces` "exact": the scene reasoner's traces, every fact true. "distilled": the paper's distillation,
    the description made with `describe_error_rate` misread facts, the judgement written by the world's text
    reasoner from the description and a hint (`data_synthesis.distill.DescriptionReasoner`, using the hint as
    `reasoner_hint` says: "lean" or "ignore"), then hint removal, style alignment and the paper's filter. The SFT examples are worded with `COMPACT_PROMPT`; `describe_share` of the training file are image →
    description examples (asked with `DESCRIBE_PROMPT`). Returns the item count, the kept fraction of
    traces, the example counts, and the assembly and distillation summaries.
    """
    from data_synthesis.assemble import AssembleConfig, write_sft_examples
    from data_synthesis.distill import false_fact_share
    from data_synthesis.pipeline import run_assemble, run_describe, run_distill

    check_traces(traces, describe_error_rate, reasoner_hint)
    described, describe_summary = run_describe(
        input_dir,
        out_dir,
        describer="scene",
        describe_error_rate=describe_error_rate,
        seed=seed,
        show_progress=show_progress,
    )
    items, assembled = run_assemble(
        out_dir, out_dir, AssembleConfig(max_options=max_options, val_fraction=val_fraction, seed=seed)
    )
    distilled, summary = run_distill(
        out_dir,
        out_dir,
        reasoner="description" if traces == "distilled" else "scene",
        reasoner_style=reasoner_style,
        reasoner_hint=reasoner_hint,
        show_progress=show_progress,
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
    traced = {}
    if traces == "distilled":
        traced = {
            "measured_error_rate": describe_summary.get("measured_error_rate", 0.0),
            "false_fact_share": false_fact_share(items, distilled, reasoner_style),
        }
    return {
        "items": len(items),
        "kept_fraction": summary["kept_fraction"],
        "drop_reasons": summary["drop_reasons"],
        **traced,
        **counts,
        "assembled": assembled,
        "distilled": summary,
    }


TRACES = ("exact", "distilled")
"""Where the judge's SFT traces come from: the scene (exact) or the paper's distillation from a description."""


def check_traces(traces: str, describe_error_rate: float, reasoner_hint: str = "lean") -> None:
    """`traces` is known, and the error rate (a probability) and the reasoner's use of the hint apply to it."""
    from data_synthesis.world import check_hint_use

    check_hint_use(reasoner_hint)
    if reasoner_hint != "lean" and traces != "distilled":
        raise ValueError(f"reasoner_hint ({reasoner_hint!r}) applies to traces=distilled only; set both")
    if traces not in TRACES:
        raise ValueError(f"traces must be one of {list(TRACES)}, got {traces!r}")
    if not 0 <= describe_error_rate <= 1:
        raise ValueError(f"describe_error_rate ({describe_error_rate}) must be in [0, 1]")
    if describe_error_rate and traces != "distilled":
        raise ValueError(f"describe_error_rate ({describe_error_rate}) applies to traces=distilled only; set both")


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

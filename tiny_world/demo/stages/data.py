"""The data stages: the synthetic world, its reverse negatives, the distilled SFT data, and the held-out pairs
in VL-RewardBench's format. Each is one step of the judge's recipe (`tiny_world.recipe`) or of
`tiny_world.heldout`, on the demo's folders."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from tiny_world.demo.stages.context import Stage, StageContext

__all__ = ["DISTILL", "HELDOUT", "NEGATIVES", "WORLD"]


def world(ctx: StageContext) -> dict[str, Any]:
    from jobs.progress import new_progress
    from tiny_world.recipe import world_size_for

    config = ctx.config
    total = world_size_for(config.world_n, config.kinds)
    with new_progress("world", enabled=ctx.console is not None) as progress:
        task = progress.add_task("world", total=total)
        rows = config.recipe().write_world(
            ctx.folder / "source", ctx.folder, progress=lambda done: progress.update(task, completed=done)
        )
    by_kind = defaultdict(int)
    for row in rows:
        by_kind[row["source"].split("/")[1]] += 1
    return {
        "drawn": total,
        "records": len(rows),
        "by_kind": dict(sorted(by_kind.items())),
        "px": config.image_size,
        "shaded": config.shaded,
    }


WORLD = Stage(
    name="world",
    title="draw the synthetic world (seeded scenes, gold answers known)",
    fields=("seed", "kinds", "world_n", "image_size", "shaded"),
    after=(),
    run=world,
    line=lambda f: (
        f"{f['records']} records of {', '.join(f['by_kind'])} ({f['drawn']} drawn), {f['px']} px"
        + (", shaded cells" if f.get("shaded") else "")
    ),
    budget=lambda c: f"{c.world_n} records",
)


def negatives(ctx: StageContext) -> dict[str, Any]:
    summary = ctx.config.recipe().write_negatives(ctx.path("world"), ctx.folder, show_progress=ctx.console is not None)
    return {"records": summary["n_out"], "negatives": summary["negatives"], "per_flaw": summary["negatives_per_flaw"]}


NEGATIVES = Stage(
    name="negatives",
    title="reverse negatives: exact flawed answers by perturbing the scene",
    fields=("seed", "negatives_n"),
    after=("world",),
    run=negatives,
    line=lambda f: f"{f['negatives']} negatives for {f['records']} records ({len(f['per_flaw'])} flaw types)",
)


def distill(ctx: StageContext) -> dict[str, Any]:
    data = ctx.config.recipe().distill(ctx.path("negatives"), ctx.folder, show_progress=ctx.console is not None)
    return {
        "items": data["items"],
        "splits": data["assembled"]["splits"],
        "sft_train": data["sft_train"],
        "sft_val": data["sft_val"],
        "kept_fraction": data["kept_fraction"],
        "reasoner_style": ctx.config.reasoner_style,
        "traces": ctx.config.traces,
        "reasoner_hint": ctx.config.reasoner_hint,
        "drop_reasons": data["drop_reasons"],
        **{k: data[k] for k in ("measured_error_rate", "false_fact_share") if k in data},
    }


def _distilled_line(f: dict[str, Any]) -> str:
    """The distilled traces' own figures: the describer's measured error rate, the false facts kept, the drops."""
    if f.get("traces") != "distilled":
        return ""
    drops = ", ".join(f"{reason} {n}" for reason, n in f.get("drop_reasons", {}).items()) or "none"
    false = f.get("false_fact_share")
    return (
        f"; distilled from descriptions with {f['measured_error_rate']:.1%} facts misread, "
        f"{'no' if false is None else f'{false:.0%} of'} kept traces state a false fact; dropped: {drops}"
    )


DISTILL = Stage(
    name="distill",
    title="descriptions → balanced MC items → distilled reasoning traces (SFT data)",
    fields=(
        "seed",
        "max_options",
        "val_fraction",
        "reasoner_style",
        "describe_share",
        "traces",
        "describe_error_rate",
        "reasoner_hint",
    ),
    after=("negatives",),
    run=distill,
    line=lambda f: (
        f"{f['items']} MC items (train {f['splits'].get('train', 0)}, val {f['splits'].get('val', 0)}); "
        f"{f['sft_train']} {f.get('reasoner_style', '')} SFT traces (kept {f['kept_fraction']:.0%})"
        + _distilled_line(f)
    ),
)


def heldout(ctx: StageContext) -> dict[str, Any]:
    from tiny_world.heldout import evidence_of, heldout_pairs
    from tiny_world.synthetic_eval import write_vlrb_set

    pairs = heldout_pairs(ctx.path("distill"), ctx.config.heldout_n, ctx.config.seed)
    if not pairs:
        raise RuntimeError("no validation-split items to hold out: raise world_n or val_fraction")
    path = write_vlrb_set(pairs, ctx.path("distill"), ctx.folder / "vlrb_heldout.jsonl")
    kinds, evidence = defaultdict(int), defaultdict(int)
    for pair in pairs:
        kinds[pair.meta["kind"]] += 1
        evidence[evidence_of(pair.meta["flaw"])] += 1
    return {
        "pairs": len(pairs),
        "asked": ctx.config.heldout_n,
        "first_preferred": sum(p.label == 0 for p in pairs),
        "by_kind": dict(sorted(kinds.items())),
        "by_evidence": dict(sorted(evidence.items())),
        "file": ctx.rel(path),
    }


HELDOUT = Stage(
    name="heldout",
    title="VL-RewardBench-format held-out pairs from validation records",
    fields=("seed", "heldout_n"),
    after=("distill",),
    run=heldout,
    line=lambda f: (
        f"{f['pairs']} pairs ({', '.join(f'{k} {n}' for k, n in f['by_kind'].items())}; "
        f"{', '.join(f'{k} flaws {n}' for k, n in f['by_evidence'].items())}) → {f['file']}"
        + (f" (fewer than the {f['asked']} asked: raise world_n or val_fraction)" if f["pairs"] < f["asked"] else "")
    ),
    budget=lambda c: f"{c.heldout_n} pairs",
)

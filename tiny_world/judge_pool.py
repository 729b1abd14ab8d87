"""Judge GRPO's own pool: fresh world records the SFT judge never saw, every negative, both display orders,
kept where the SFT judge still has something to learn.

Why a pool of its own (docs/learning.md, "RL that teaches"): GRPO on the SFT items trains on what SFT
memorised. There the SFT judge is right on ~90 % of items, most groups have zero reward variance, and a
trace that misreads the picture but lands on the right letter (remembered) earns full reward, which erodes
the "verdict follows the image line" property held-out accuracy rests on. Here:

- the records come from a fresh world draw (its own seed, `POOL_SEED_OFFSET`), with any record whose
  question and scene SFT's world also holds removed (`content_key`);
- every negative of a record is paired with its reference (`all_pairs`), and each pair is trained in both
  display orders (`both_orders`);
- the SFT judge judges each pair greedily in both orders (`filter_pool`): the wrong or inconsistent pairs
  are kept, plus an equal number of right ones (so the pool is not all failures and GRPO keeps what is
  right), chosen by a seeded draw;
- `dev` records are split off before filtering, for choices (learning rate, steps): the held-out set that
  figures are reported on is the SFT world's validation split, never looked at for choices.

The same pool feeds the honest control, more SFT (`write_pool_sft`): traces made for the kept pairs the way the
SFT judge's were (exact, or distilled from descriptions with errors, when only the kept traces count), so
"more SFT on the same items" is what GRPO must beat to be worth its cost.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from judge.types import MCItem, Verdict

__all__ = [
    "POOL_SEED_OFFSET",
    "all_pairs",
    "both_orders",
    "content_key",
    "distilled_pool_sft",
    "filter_pool",
    "pool_sft_examples",
    "split_dev",
    "write_pool_items",
    "write_pool_sft",
    "write_pool_world",
]

POOL_SEED_OFFSET = 7919
"""The pool's world is drawn with `seed + POOL_SEED_OFFSET`: other scenes than SFT's world (seed `seed`)."""

Row = dict[str, Any]


def content_key(row: Row) -> str:
    """What makes two world records the same question: the question and the scene it is asked about."""
    return json.dumps([row["question"], row["world"]["scene"]], sort_keys=True)


def write_pool_world(recipe: Any, folder: str | Path, n: int, *, exclude: Iterable[str] = ()) -> list[Row]:
    """A fresh world of about `n` records of `recipe.kinds` in `folder`, with `recipe.negatives_n` exact
    negatives each; records whose `content_key` is in `exclude` (SFT's) are dropped. Image paths absolute."""
    from data_synthesis.pipeline import run_negatives
    from tiny_world.recipe import write_kind_world

    folder = Path(folder)
    seed = recipe.seed + POOL_SEED_OFFSET
    write_kind_world(
        folder / "source",
        folder,
        kinds=recipe.kinds,
        n=n,
        seed=seed,
        image_size=recipe.image_size,
        shaded=recipe.shaded,
    )
    rows, _ = run_negatives(folder, folder, generator="scene", n=recipe.negatives_n, seed=seed, show_progress=False)
    excluded = set(exclude)
    return [
        {**row, "image": str((folder / row["image"]).resolve())}
        for row in rows
        if row.get("negatives") and content_key(row) not in excluded
    ]


def split_dev(rows: Sequence[Row], dev_fraction: float, seed: int) -> tuple[list[Row], list[Row]]:
    """(pool rows, dev rows): a seeded `dev_fraction` of the records set apart for choices."""
    if not 0 <= dev_fraction < 1:
        raise ValueError(f"dev_fraction ({dev_fraction}) must be in [0, 1)")
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    n_dev = round(dev_fraction * len(rows))
    dev = set(order[:n_dev])
    return [r for i, r in enumerate(rows) if i not in dev], [r for i, r in enumerate(rows) if i in dev]


def all_pairs(rows: Iterable[Row]) -> list[MCItem]:
    """Every negative of every record against its reference, the reference shown first (`label` 0).

    `meta`: the record id, its question kind and the negative's flaw (`tiny_world.heldout` scores by them)
    and the record's world (for exact traces)."""
    pairs = []
    for row in rows:
        for j, negative in enumerate(row["negatives"]):
            meta = {"record": row["id"], "kind": row["source"].split("/")[1], "flaw": negative["flaw"]}
            pairs.append(
                MCItem(
                    id=f"{row['id']}/n{j}",
                    image=row["image"],
                    question=row["question"],
                    candidates=[row["answer"], negative["text"]],
                    label=0,
                    meta={**meta, "world": row["world"]},
                )
            )
    return pairs


def both_orders(pairs: Iterable[MCItem]) -> list[MCItem]:
    """Each pair as given (id suffix `/ab`) and with its candidates swapped (`/ba`)."""
    out = []
    for pair in pairs:
        out.append(replace(pair, id=f"{pair.id}/ab"))
        swapped = pair.candidates[::-1]
        label = None if pair.label is None else len(pair.candidates) - 1 - pair.label
        out.append(replace(pair, id=f"{pair.id}/ba", candidates=swapped, label=label))
    return out


def filter_pool(pairs: Sequence[MCItem], verdicts: Sequence[Verdict], seed: int) -> tuple[list[MCItem], dict]:
    """The pairs the SFT judge got wrong or judged inconsistently across the two display orders, plus as many
    it got right (a seeded draw; all of them if there are fewer), in the input order.

    Returns the kept pairs and the pool's figures: `n` pairs judged, `sft_accuracy` (undecided counts 0.5),
    `hard` (wrong or inconsistent), `kept`, and `image_share` (kept pairs whose flaw only the picture shows)."""
    from tiny_world.heldout import evidence_of, score_choices

    if len(pairs) != len(verdicts):
        raise ValueError(f"{len(pairs)} pairs but {len(verdicts)} verdicts")
    hard = [i for i, (p, v) in enumerate(zip(pairs, verdicts)) if v.choice != p.label or v.consistent is not True]
    hard_set = set(hard)
    right = [i for i in range(len(pairs)) if i not in hard_set]
    keep = hard_set | set(random.Random(seed).sample(right, min(len(right), len(hard))))
    kept = [p for i, p in enumerate(pairs) if i in keep]
    scored = score_choices({"choice": v.choice, "label": p.label} for p, v in zip(pairs, verdicts)) if pairs else {}
    figures = {
        "n": len(pairs),
        "sft_accuracy": round(scored["accuracy"], 4) if pairs else None,
        "hard": len(hard),
        "kept": len(kept),
        "image_share": round(sum(evidence_of(p.meta["flaw"]) == "image" for p in kept) / max(1, len(kept)), 4),
    }
    return kept, figures


def _item_row(item: MCItem) -> Row:
    meta = {k: v for k, v in item.meta.items() if k != "world"}
    return {**item.to_dict(), "meta": meta}


def write_pool_items(pairs: Iterable[MCItem], path: str | Path) -> int:
    """The kept pairs in both display orders as labelled MC items (`rl/train.jsonl` form, what
    `training.data.load_grpo_dataset` reads); returns the item count."""
    from jobs.jsonl import write_jsonl_atomic

    rows = [_item_row(item) for item in both_orders(pairs)]
    write_jsonl_atomic(Path(path), rows)
    return len(rows)


def pool_sft_examples(pairs: Iterable[MCItem], style: str) -> list[Row]:
    """The pairs in both display orders as judge-SFT examples whose traces are the scene reasoner's (exact),
    worded with `COMPACT_PROMPT` as the recipe's SFT data; each pair's `meta` holds its record's world."""
    from data_synthesis.assemble import to_sft_example
    from data_synthesis.world import Scene, Task, scene_reasoner
    from judge.prompt import COMPACT_PROMPT

    examples = []
    for item in both_orders(pairs):
        world = item.meta["world"]
        scene, task = Scene.from_dict(world["scene"]), Task.from_dict(world["task"])
        trace = scene_reasoner(scene, task, item.question, item.candidates, style=style)
        examples.append(to_sft_example(_item_row(item), trace, COMPACT_PROMPT))
    return examples


def distilled_pool_sft(
    pairs: Iterable[MCItem], style: str, describe_error_rate: float, seed: int, reasoner_hint: str = "lean"
) -> tuple[list[Row], dict[str, Any]]:
    """The pairs in both display orders as judge-SFT examples whose traces are *distilled*, as the SFT data of
    `traces: distilled` is (`tiny_world.recipe.distill_judge_data`): each record described with
    `describe_error_rate` misread facts (one description per record, drawn from `seed` and its id), the world's
    text reasoner judging from the description with a hint (used as `reasoner_hint` says), hint removal, style
    alignment, the paper's filter.

    Only kept traces become examples. Returns them and the figures: `items`, `kept`, `drop_reasons`,
    `measured_error_rate`, `false_fact_share` and `dropped` (the ids of the items without a trace; judge
    GRPO, which needs only the label, still trains on them)."""
    from collections import Counter

    from data_synthesis.assemble import to_sft_example
    from data_synthesis.describe import describe_world, measured_error_rate
    from data_synthesis.distill import DescriptionReasoner, Distiller, RuleRewriter, false_fact_share
    from judge.prompt import COMPACT_PROMPT

    described: dict[str, tuple[str, Row]] = {}
    items = []
    for item in both_orders(pairs):
        record = item.meta["record"]
        if record not in described:
            described[record] = describe_world(item.meta["world"]["scene"], record, describe_error_rate, seed)
        row = _item_row(item)
        items.append({**row, "meta": {**row["meta"], "description": described[record][0], "world": item.meta["world"]}})
    reasoner_items = [{**item, "meta": {"description": item["meta"]["description"]}} for item in items]
    distilled = Distiller(DescriptionReasoner(style, reasoner_hint), RuleRewriter())(reasoner_items)
    examples = [
        to_sft_example(
            {**item, "meta": {k: v for k, v in item["meta"].items() if k != "world"}}, row["completion"], COMPACT_PROMPT
        )
        for item, row in zip(items, distilled)
        if row["kept"]
    ]
    rate = measured_error_rate([{"description_meta": meta} for _, meta in described.values()])
    figures = {
        "items": len(items),
        "kept": len(examples),
        "drop_reasons": dict(sorted(Counter(row["drop_reason"] for row in distilled if not row["kept"]).items())),
        "measured_error_rate": rate if rate is not None else 0.0,
        "false_fact_share": false_fact_share(items, distilled, style),
        "dropped": [row["id"] for row in distilled if not row["kept"]],
    }
    return examples, figures


def write_pool_sft(
    pairs: Iterable[MCItem],
    path: str | Path,
    style: str,
    *,
    traces: str = "exact",
    describe_error_rate: float = 0.0,
    reasoner_hint: str = "lean",
    seed: int = 0,
) -> dict[str, Any]:
    """The pool's SFT examples written to `path`: exact traces (`pool_sft_examples`) or distilled ones
    (`distilled_pool_sft`); returns the example count (`examples`) and, for distilled traces, their figures."""
    from jobs.jsonl import write_jsonl_atomic

    figures: dict[str, Any] = {}
    if traces == "distilled":
        examples, figures = distilled_pool_sft(pairs, style, describe_error_rate, seed, reasoner_hint)
    else:
        examples = pool_sft_examples(pairs, style)
    write_jsonl_atomic(Path(path), examples)
    return {"examples": len(examples), **figures}

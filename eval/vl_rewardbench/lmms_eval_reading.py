"""The `lmms-eval` reading: VL-RewardBench as lmms-eval 0.7.3's `vl_rewardbench` task reads it, so that numbers
quoted from lmms-eval can be reproduced from this toolkit's runs, or from lmms-eval's own sample logs.

lmms-eval differs from the official scripts at every step: one reply per item, the responses shown in an order
fixed by the parity of their lengths, reasoning tags stripped, an unreadable reply a coin flip (every item
stays in the denominator), its own categories from the id, and the macro average only. Each rule below is
lmms-eval's, line for line (`lmms_eval/tasks/vl_rewardbench/utils.py`, `lmms_eval/api/reasoning.py`).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from eval.pairwise import PairItem
from eval.vl_rewardbench.accuracy import Unit
from eval.vl_rewardbench.data import match_predictions
from eval.vl_rewardbench.official import parse_official
from eval.vl_rewardbench.readings import ReadingOptions, Rows, reading, reading_metrics
from jobs.jsonl import InputError

__all__ = [
    "LMMS_EVAL_GROUPS",
    "LMMS_EVAL_REASONING_TAGS",
    "lmms_eval_category",
    "lmms_eval_display",
    "lmms_eval_reading",
    "lmms_eval_rows",
    "lmms_eval_score",
]

LMMS_EVAL_GROUPS = {
    "mathverse": "reasoning",
    "hallucination": "hallucination",
    "mmmu": "reasoning",
    "rlhf": "hallucination",
    "rlaif": "hallucination",
    "wildvision": "general",
    "vlfeedback": "general",
}
"""lmms-eval 0.7.3's `group_mapping` (`lmms_eval/tasks/vl_rewardbench/utils.py`); any other prefix is general."""
LMMS_EVAL_REASONING_TAGS = (("<think>", "</think>"), ("<analysis>", "</analysis>"))
"""What lmms-eval's CLI strips from a reply before scoring (its `--reasoning_tags` default)."""


def lmms_eval_display(responses: Sequence[str]) -> list[int]:
    """lmms-eval's display order: as given when the two responses' lengths sum to an even number, else swapped.

    >>> lmms_eval_display(["ab", "cd"]), lmms_eval_display(["ab", "c"])
    ([0, 1], [1, 0])
    """
    return [0, 1] if sum(len(r) for r in responses) % 2 == 0 else [1, 0]


def lmms_eval_category(item_id: str) -> str:
    """lmms-eval's category: the id cut at the first `-`, then at the first `_`, lower-cased, then mapped.

    >>> [lmms_eval_category(i) for i in ("RLAIF-V_2", "hallucination-9", "povid_1", "rlhf_3", "x")]
    ['hallucination', 'hallucination', 'general', 'hallucination', 'general']
    """
    return LMMS_EVAL_GROUPS.get(item_id.split("-")[0].split("_")[0].lower(), "general")


def _strip_reasoning(text: str, tag_pairs: Sequence[tuple[str, str]] = LMMS_EVAL_REASONING_TAGS) -> str:
    """lmms-eval's `strip_reasoning_tags`, line for line: blocks removed; with only a closing tag left, the
    text after the last one; then stripped."""
    result = text
    for start_tag, end_tag in tag_pairs:
        while start_tag in result and end_tag in result:
            start = result.find(start_tag)
            end = result.find(end_tag, start)
            if start != -1 and end != -1:
                result = result[:start] + result[end + len(end_tag) :]
            else:
                break
        if end_tag in result and start_tag not in result:
            result = result.rsplit(end_tag, 1)[-1]
    return result.strip()


def _lmms_eval_reply(item: PairItem, row: Mapping[str, Any]) -> tuple[str, int | None]:
    """(reply, model reading of it) of a predictions row, in any of the three forms the reading takes."""
    if isinstance(row.get("reply"), str):
        return row["reply"], row.get("llm_answer")
    display = lmms_eval_display(item.responses)
    calls, raw = row.get("calls"), row.get("raw")
    if isinstance(calls, list) and isinstance(raw, list):
        for call, reply in zip(calls, raw):
            if list(call.get("display") or []) == display:
                return reply, call.get("llm_answer")
        raise InputError(
            f"prediction for {item.id}: none of its {len(calls)} calls showed the responses in lmms-eval's order "
            f"{display} (by the parity of their lengths), so no reply of it is one lmms-eval could have scored"
        )
    raise InputError(
        f"prediction for {item.id}: the lmms-eval reading needs 'reply' (the reply to lmms-eval's prompt), an "
        "official-mode row ('calls' and 'raw'), or a row of lmms-eval's --log_samples file ('doc' and 'resps')"
    )


def lmms_eval_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Predictions rows for the lmms-eval reading; rows of lmms-eval's own `--log_samples` file (`doc_id`, `doc`
    with the item's `id`, `resps`) become `{"id", "reply"}` (the reply before lmms-eval stripped reasoning tags,
    which the reading strips again), other rows are kept."""
    out = []
    for row in rows:
        if isinstance(row.get("doc"), Mapping) and "resps" in row and "id" not in row:
            reply: Any = row["resps"]
            while isinstance(reply, list) and reply:
                reply = reply[0]
            out.append({"id": row["doc"].get("id"), "reply": reply if isinstance(reply, str) else ""})
        else:
            out.append(dict(row))
    return out


def lmms_eval_score(
    pairs: Sequence[tuple[PairItem, Mapping[str, Any]]], *, seed: int = 0
) -> tuple[list[Unit], dict[str, Any]]:
    """lmms-eval 0.7.3's `vlrewardbench_process_results` and `vlrewardbench_aggregate_results` on one reply per
    item: the reasoning tags stripped, the official regex's number (else the stored model reading, `llm_answer`,
    which stands for its gpt-4o-mini call; else `random.Random(seed).choice([1, 2])`, drawn in file order)
    against `human_ranking.index(0 if parity == 0 else 1) + 1`; per category the mean score, then the mean over
    the categories present. Returns the units (every item decided) and the `lmms_eval_*` keys."""
    rng = random.Random(seed)
    by_category: dict[str, list[float]] = {}
    expected: dict[str, list[float]] = {}  # coin flips at their expected value, free of the draw
    units, coins, read, other_number = [], 0, 0, 0
    for item, row in pairs:
        reply, llm_answer = _lmms_eval_reply(item, row)
        answer = parse_official(_strip_reasoning(reply))
        flipped = False
        if answer is None and llm_answer in (1, 2):
            answer, read = llm_answer, read + 1
        elif answer is None:
            answer, coins, flipped = rng.choice([1, 2]), coins + 1, True
        elif answer not in (1, 2):
            other_number += 1
        parity = sum(len(r) for r in item.responses) % 2
        ranking = list(item.extra.get("human_ranking") or ([0, 1] if item.preferred == 0 else [1, 0]))
        correct = answer == ranking.index(0 if parity == 0 else 1) + 1
        category = lmms_eval_category(str(item.extra.get("id", item.id)))
        by_category.setdefault(category, []).append(1.0 if correct else 0.0)
        expected.setdefault(category, []).append(0.5 if flipped else float(correct))
        units.append(Unit(category, item.source, "agree" if correct else "reject"))
    means = {category: sum(scores) / len(scores) for category, scores in by_category.items()}
    extra: dict[str, Any] = {
        "lmms_eval_score": sum(means.values()) / len(means) if means else None,
        **{f"lmms_eval_{category}": mean for category, mean in means.items()},
        "lmms_eval_score_coin_expected": (
            sum(sum(v) / len(v) for v in expected.values()) / len(expected) if expected else None
        ),
        "lmms_eval_coin_flips": coins,
        "lmms_eval_llm_read": read,
        "lmms_eval_other_number": other_number,
    }
    return units, extra


@reading("lmms-eval")
def lmms_eval_reading(items: Sequence[PairItem], predictions: Rows, options: ReadingOptions) -> dict[str, Any]:
    """One reply per item (`lmms_eval_rows` turns lmms-eval's sample log into such rows) read by `lmms_eval_score`
    with `options.seed`; the accuracies beside its `lmms_eval_*` keys are over lmms-eval's categories."""
    pairs = match_predictions(items, lmms_eval_rows(predictions))
    units, keys = lmms_eval_score(pairs, seed=options.seed)
    return reading_metrics("lmms-eval", len(pairs), units, keys, options)

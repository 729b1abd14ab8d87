"""Picking a candidate (first, random, judge, oracle) and MM-Vet's scores for each way of picking."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np

from eval.bootstrap import BOOTSTRAP_RESAMPLES, RatioSet, bootstrap_intervals, interval_keys
from eval.common import item_rng
from eval.mmvet.data import CAPABILITIES, MMVetQuestion
from eval.mmvet.grader import Grade

SELECTORS = ("first", "random", "judge", "oracle")
"""How one of the N candidates is chosen: candidate 0, a seeded coin, the judge, the best grade."""


def oracle_pick(scores: Sequence[float]) -> int:
    """The candidate with the highest grade; ties go to the lowest index.

    >>> oracle_pick([0.5, 1.0, 1.0])
    1
    """
    return max(range(len(scores)), key=lambda j: (scores[j], -j))


def random_pick(seed: int, question_id: str, n: int) -> int:
    """A seeded candidate index that depends only on (seed, question id), not on batching or order."""
    return item_rng(seed, question_id, "random").randrange(n)


def capabilities_in(questions: Sequence[MMVetQuestion]) -> list[str]:
    """The capabilities the questions test: the paper's six in its order, then any others sorted."""
    present = {c for q in questions for c in q.capabilities}
    return [c for c in CAPABILITIES if c in present] + sorted(present - set(CAPABILITIES))


def _mean(values: Sequence[float]) -> float | None:
    # A plain left-to-right sum divided by the count, as the official evaluator accumulates scores.
    return sum(values) / len(values) if values else None


def score_mmvet(
    questions: Sequence[MMVetQuestion],
    grades_by_question: Mapping[str, Sequence[Grade | float]],
    picks: Mapping[str, Mapping[str, int]],
    *,
    judge_undecided: Collection[str] = (),
    judge_consistent: Mapping[str, bool | None] | None = None,
    grade_runs: Mapping[str, Sequence[Sequence[float]]] | None = None,
    seed: int = 0,
    resamples: int = BOOTSTRAP_RESAMPLES,
) -> dict[str, Any]:
    """Flat MM-Vet metrics for each selector: the grade of the picked candidate, averaged.

    With `grade_runs` (`{id: [[grade per candidate] per grading run]}`, from `--num-runs`), every score is
    the mean over the runs, as the official evaluator's `--num_run` reports it, and `{selector}_total_std`
    is the standard deviation of the per-run totals (numpy's population std, as the official script) with
    `{selector}_total_runs` the per-run totals. Each score has a seeded 95 % bootstrap interval over
    questions (`*_ci95_low/high`).

    Args:
        questions: the questions scored.
        grades_by_question: each question's grade per candidate (a `Grade`, or a bare score for one that
            parsed at the first try).
        picks: `{selector: {question id: candidate index}}`, e.g. for `first`, `random`, `judge`, `oracle`.
        judge_undecided: ids where the judge gave no choice (its pick fell back to candidate 0).
        judge_consistent: `Verdict.consistent` per id (`None` where fewer than two display orders parsed:
            counted as not consistent, as in the pairwise benchmarks, and in `judge_consistency_undetermined`).

    Returns:
        `{selector}_total` (mean over all questions) and `{selector}_{capability}` (mean over the questions
        that include it, for each capability present), all in [0, 1]; `n`; `n_candidates`; `unparsed`
        (judge undecided, a count); `judge_consistency` (share of all questions with a consistent verdict); `grader_retried` and `grader_failed` (counts over all graded
        candidates).
    """
    sizes = {len(grades_by_question[q.id]) for q in questions}
    if len(sizes) > 1:
        raise ValueError(f"every question needs the same number of graded candidates, got sizes {sorted(sizes)}")
    grades = {
        q.id: [g if isinstance(g, Grade) else Grade(float(g)) for g in grades_by_question[q.id]] for q in questions
    }
    metrics: dict[str, Any] = {"n": len(questions), "n_candidates": sizes.pop() if sizes else 0}
    capabilities = capabilities_in(questions)
    ordered = [s for s in SELECTORS if s in picks] + sorted(set(picks) - set(SELECTORS))
    runs = grade_runs or {q.id: [[g.score for g in grades[q.id]]] for q in questions}
    n_runs = {len(runs[q.id]) for q in questions}
    if len(n_runs) > 1:
        raise ValueError(f"every question needs the same number of grading runs, got {sorted(n_runs)}")
    metrics["grading_runs"] = n_runs.pop() if n_runs else 1
    ratios = RatioSet()
    for selector in ordered:
        per_run: dict[str, list[float]] = {}
        for q in questions:
            index = picks[selector].get(q.id)
            if index is None or not 0 <= index < len(grades[q.id]):
                raise ValueError(f"selector {selector!r}: no valid pick for question {q.id!r} (got {index!r})")
            per_run[q.id] = [run[index] for run in runs[q.id]]
        chosen = {qid: sum(v) / len(v) for qid, v in per_run.items()}
        metrics[f"{selector}_total"] = _mean([chosen[q.id] for q in questions])
        totals = [_mean([per_run[q.id][r] for q in questions]) for r in range(metrics["grading_runs"])]
        metrics[f"{selector}_total_runs"] = totals
        metrics[f"{selector}_total_std"] = float(np.std(totals)) if questions else None
        ratios.add(f"{selector}_total", [chosen[q.id] for q in questions], [1.0] * len(questions))
        for capability in capabilities:
            metrics[f"{selector}_{capability}"] = _mean(
                [chosen[q.id] for q in questions if capability in q.capabilities]
            )
            ratios.add(
                f"{selector}_{capability}",
                [chosen[q.id] if capability in q.capabilities else 0.0 for q in questions],
                [float(capability in q.capabilities) for q in questions],
            )
    metrics.update(interval_keys(bootstrap_intervals(ratios, n=resamples, seed=seed)))
    metrics["bootstrap_resamples"], metrics["bootstrap_seed"] = resamples, seed
    ids = {q.id for q in questions}
    metrics["unparsed"] = len(ids & set(judge_undecided))
    given = {qid: f for qid, f in (judge_consistent or {}).items() if qid in ids}
    metrics["judge_consistency"] = _mean([float(given.get(q.id) is True) for q in questions]) if given else None
    metrics["judge_consistency_undetermined"] = sum(given.get(q.id) is None for q in questions) if given else 0
    every = [g for q in questions for g in grades[q.id]]
    metrics["grader_retried"] = sum(g.tries > 1 for g in every)
    metrics["grader_failed"] = sum(g.failed for g in every)
    return metrics

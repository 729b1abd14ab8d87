"""`report.md`: selectors × capabilities (× 100, as the official table), how sure, and which grader."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from eval.common import markdown_table
from eval.mmvet.scoring import SELECTORS


def mmvet_report(metrics: Mapping[str, Any], capabilities: Sequence[str], grader: str, judge_name: str) -> str:
    """The Markdown of `report.md` from `score_mmvet`'s metrics (with provenance), naming grader and judge."""
    headers = ["selector", *capabilities, "total", "total 95 % CI", "total std (runs)"]

    def interval(selector: str) -> str:
        low, high = metrics.get(f"{selector}_total_ci95_low"), metrics.get(f"{selector}_total_ci95_high")
        return "–" if low is None or high is None else f"{100 * low:.1f}–{100 * high:.1f}"

    rows = [
        [selector, *(100 * metrics[f"{selector}_{c}"] for c in [*capabilities, "total"])]
        + [interval(selector), 100 * (metrics.get(f"{selector}_total_std") or 0.0)]
        for selector in SELECTORS
        if f"{selector}_total" in metrics
    ]
    n, k = metrics["n"], metrics["n_candidates"]
    consistency = metrics["judge_consistency"]
    lines = [
        "# MM-Vet best-of-N",
        "",
        f"{n} questions, {k} candidates each; the judge ({judge_name}) picks one, MM-Vet's grader scores it. "
        "Scores × 100: mean grade over the questions that include each capability, and over all questions.",
        "",
        markdown_table(headers, rows),
        "",
        "`first` = candidate 0 (no selection), `random` = a seeded pick, `oracle` = the best-graded candidate "
        f"(the ceiling of best-of-N). Every candidate was graded {metrics.get('grading_runs', 1)} time(s); scores "
        "are the mean over those gradings and `std` the standard deviation of the per-run totals (the official "
        "evaluator's --num_run; the MM-Vet paper uses 5). 95 % CI: percentile bootstrap over questions "
        f"({metrics.get('bootstrap_resamples')} resamples, seed {metrics.get('bootstrap_seed')}).",
        "",
        f"- judge undecided (fell back to candidate 0): {metrics['unparsed']} of {n}",
        "- judge consistent across display orders: "
        + (
            "n/a"
            if consistency is None
            else f"{100 * consistency:.1f} % of all questions (one with fewer than two parsed orders counts as not "
            f"consistent: {metrics.get('judge_consistency_undetermined', 0)} such)"
        ),
        f"- grades that needed a retry: {metrics['grader_retried']} of {n * k}; fell back to 0: "
        f"{metrics['grader_failed']}",
        "",
        "Grading followed the official MM-Vet grader prompt and retry rule (yuweihao/MM-Vet "
        "`mm-vet_evaluator.py`: few-shot prompt, max_tokens 3, temperature 0; an unparsable grade is asked again "
        "with “Predict the correctness of the answer (digit):” at temperatures 0.0, 0.5, 1.0, 1.5, then scored "
        f"0). Grader: {grader}. Published MM-Vet numbers use gpt-4-0613; another grader's scores are not "
        "directly comparable to them.",
        "",
    ]
    if "data_sha256" in metrics:
        lines += [f"Data: `{metrics['data_source']}`, {metrics['data_rows']} questions, data_sha256 "
                  f"`{metrics['data_sha256']}`.", ""]  # fmt: skip
    return "\n".join(lines)

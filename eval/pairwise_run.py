"""Run a pairwise benchmark into a run directory: predictions → metrics.json → report.md → charts.

One runner serves VL-RewardBench and Multimodal RewardBench in both modes and the "score a predictions
file" path, so the three produce the same files and the same numbers for the same decisions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eval.common import bar_chart, markdown_table, resumable_predictions, write_json_atomic, write_text_atomic
from eval.pairwise import PairItem
from judge.engine import BatchFn, Engine

__all__ = ["PairwiseBenchmark", "report_pairwise", "run_pairwise"]


@dataclass
class PairwiseBenchmark:
    """What the runner needs to know about a benchmark."""

    name: str
    """File-name stem for charts, e.g. `vl_rewardbench`."""
    title: str
    score: Callable[[Sequence[PairItem], Sequence[Mapping[str, Any]]], dict[str, Any]]
    groups: Sequence[str] | None = None
    """Reporting groups in display order; None: every `accuracy_*` key that is not a source."""
    summary_keys: Sequence[str] = ("overall_accuracy",)
    """Headline metrics after the groups, e.g. overall and macro."""
    sources: Sequence[str] = ()
    """Finer per-source keys shown in a second table."""
    references: list[dict[str, Any]] = field(default_factory=list)
    """Published rows (percent), keyed by group name or `overall`/`macro`."""


def _pct(value: float | None) -> float | None:
    return None if value is None else 100.0 * value


def _group_keys(bench: PairwiseBenchmark, metrics: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(column label, metric key) for each reporting group."""
    if bench.groups is not None:
        return [(g, f"accuracy_{g}") for g in bench.groups]
    skip = {f"accuracy_{s}" for s in bench.sources} | {"overall_accuracy"}
    return [(k[len("accuracy_") :], k) for k in sorted(metrics) if k.startswith("accuracy_") and k not in skip]


def report_pairwise(
    bench: PairwiseBenchmark, metrics: Mapping[str, Any], out: str | Path, *, judge_name: str, protocol: str
) -> None:
    """Write `metrics.json`, `report.md` and the charts for one scored run."""
    out = Path(out)
    write_json_atomic(out / "metrics.json", dict(metrics))
    groups = _group_keys(bench, metrics)
    summary = [(key.replace("_accuracy", ""), key) for key in bench.summary_keys]
    headers = ["judge", *[g for g, _ in groups], *[s for s, _ in summary], "n", "unparsed"]
    rows: list[list[Any]] = [
        [f"**{judge_name}** (this run)"]
        + [_pct(metrics.get(k)) for _, k in groups + summary]
        + [metrics["n"], metrics["unparsed"]]
    ]
    for ref in bench.references:
        rows.append([f"{ref['judge']} (published)"] + [ref.get(label) for label, _ in groups + summary] + [None, None])
    lines = [
        f"# {bench.title}: {judge_name}",
        "",
        f"Protocol: {protocol}",
        "",
        "Accuracy in percent. Published rows are the papers' numbers under the official protocol.",
        "",
        markdown_table(headers, rows),
    ]
    present_sources = [s for s in bench.sources if f"accuracy_{s}" in metrics]
    if present_sources:
        lines += [
            "",
            "## Per source",
            "",
            markdown_table(["source", "accuracy"], [[s, _pct(metrics[f"accuracy_{s}"])] for s in present_sources]),
        ]
    if "consistency" in metrics:
        consistency = [
            (k[len("consistency_") :], v) for k, v in sorted(metrics.items()) if k.startswith("consistency_")
        ]
        lines += [
            "",
            "## Order consistency",
            "",
            "Share of items whose two display orders gave the same choice.",
            "",
            markdown_table(
                ["group", "consistency"],
                [["all", _pct(metrics["consistency"])]] + [[g, _pct(v)] for g, v in consistency],
            ),
        ]
        bar_chart(
            out / f"{bench.name}_consistency.png",
            {judge_name: {g: _pct(v) for g, v in consistency} | {"all": _pct(metrics["consistency"])}},
            title=f"{bench.title}: order consistency",
            ylabel="consistency (%)",
        )
    ks = sorted(int(k[len("overall_accuracy_k") :]) for k in metrics if k.startswith("overall_accuracy_k"))
    if ks:
        lines += [
            "",
            "## By number of calls",
            "",
            "The official k-curve: each item decided by the majority of its first k calls.",
            "",
            markdown_table(
                ["k", "overall", "macro"],
                [[k, _pct(metrics[f"overall_accuracy_k{k}"]), _pct(metrics.get(f"macro_accuracy_k{k}"))] for k in ks],
            ),
        ]
    if metrics.get("no_majority"):
        lines += ["", f"{metrics['no_majority']} item(s) had no majority outcome over their calls (left out)."]
    write_text_atomic(out / "report.md", "\n".join(lines) + "\n")

    series = {f"{judge_name} (this run)": {label: _pct(metrics.get(k)) for label, k in groups + summary}}
    for ref in bench.references:
        values = {label: ref.get(label) for label, _ in groups + summary}
        if any(v is not None for v in values.values()):
            series[ref["judge"]] = values
    bar_chart(out / f"{bench.name}_accuracy.png", series, title=f"{bench.title}: accuracy by category")


def run_pairwise(
    bench: PairwiseBenchmark,
    items: Sequence[PairItem],
    out: str | Path,
    predict: BatchFn | Callable[[Sequence[PairItem]], list[dict[str, Any]]],
    *,
    batch_size: int,
    judge_name: str,
    protocol: str,
    show_progress: bool = True,
    engine: Engine | None = None,
) -> dict[str, Any]:
    """Predict (resuming from `out/predictions.jsonl`), score, and write the report; returns the metrics.

    `predict` runs on `engine` (default: this process); for Ray, pass a `BatchFn` that builds the judge
    where it runs (`eval.workers.mc_work`, `official_work`).
    """
    rows = resumable_predictions(
        Path(out) / "predictions.jsonl",
        items,
        predict,
        batch_size=batch_size,
        description=bench.name,
        show_progress=show_progress,
        engine=engine,
    )
    metrics = bench.score(items, rows)
    report_pairwise(bench, metrics, out, judge_name=judge_name, protocol=protocol)
    return metrics

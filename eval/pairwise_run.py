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
from jobs.executor import BatchFn, Executor
from jobs.jsonl import write_jsonl_atomic

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
    """Published rows (percent), keyed by column label or `overall`/`macro`; `protocol` says how each was
    measured (`official` = the benchmark's own scripts) and `note` adds what a reader should know."""
    unparsed_rule: str = "leaves unparsed items out of the denominator"
    """What the official figure does with an item whose answer did not parse, for the report."""
    columns: Sequence[tuple[str, str]] | None = None
    """(label, metric key) of the main table's category columns; overrides `groups` (e.g. a leaderboard's
    merged columns)."""


def _pct(value: float | None) -> float | None:
    return None if value is None else 100.0 * value


def _group_keys(bench: PairwiseBenchmark, metrics: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(column label, metric key) for each reporting group."""
    if bench.columns is not None:
        return list(bench.columns)
    if bench.groups is not None:
        return [(g, f"accuracy_{g}") for g in bench.groups]
    skip = {f"accuracy_{s}" for s in bench.sources} | {"overall_accuracy"}
    return [(k[len("accuracy_") :], k) for k in sorted(metrics) if k.startswith("accuracy_") and k not in skip]


def _interval(metrics: Mapping[str, Any], key: str) -> str:
    low, high = metrics.get(f"{key}_ci95_low"), metrics.get(f"{key}_ci95_high")
    return "–" if low is None or high is None else f"{100 * low:.1f}–{100 * high:.1f}"


def _uncertainty_lines(bench: PairwiseBenchmark, metrics: Mapping[str, Any], keys: list[tuple[str, str]]) -> list[str]:
    """The headline numbers with their bootstrap intervals and the two readings of unparsed items."""
    rows = []
    for label, key in keys:
        if key not in metrics:
            continue
        rows.append(
            [
                label,
                _pct(metrics.get(key)),
                _interval(metrics, key),
                _pct(metrics.get(f"{key}_unparsed_wrong")),
                _pct(metrics.get(f"{key}_unparsed_coin")),
            ]
        )
    return [
        "",
        "## Uncertainty and unparsed answers",
        "",
        f"95 % intervals: percentile bootstrap over items ({metrics.get('bootstrap_resamples')} resamples, seed "
        f"{metrics.get('bootstrap_seed')}). The official figure {bench.unparsed_rule}; the last two columns count "
        "every unparsed item as wrong, and as a coin flip (half a point), over all items.",
        "",
        markdown_table(["metric", "official", "95 % CI", "unparsed = wrong", "unparsed = coin"], rows),
    ]


def _provenance_lines(metrics: Mapping[str, Any]) -> list[str]:
    if "data_sha256" not in metrics:
        return []
    revision = metrics.get("data_revision")
    return [
        "",
        f"Data: `{metrics.get('data_source')}`" + (f" at hub commit `{revision}`" if revision else "") + f", "
        f"{metrics.get('data_rows')} rows, data_sha256 `{metrics['data_sha256']}`"
        + (
            f"; {metrics['data_skipped_rows']} bad row(s) left out (--max-bad-fraction)."
            if metrics.get("data_skipped_rows")
            else "."
        ),
    ]


def _reference_label(ref: Mapping[str, Any]) -> str:
    protocol = ref.get("protocol", "official")
    return (
        f"{ref['judge']} (published, {protocol} protocol)" if protocol != "official" else f"{ref['judge']} (published)"
    )


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
        rows.append([_reference_label(ref)] + [ref.get(label) for label, _ in groups + summary] + [None, None])
    official = [r["judge"] for r in bench.references if r.get("protocol", "official") == "official"]
    others = [r for r in bench.references if r.get("protocol", "official") != "official"]
    label = "Accuracy in percent. Published rows are the papers' numbers"
    if official:
        label += f"; measured under the official protocol: {', '.join(official)}"
    if others:
        label += "; under another protocol (not directly comparable): " + ", ".join(
            f"{r['judge']} ({r['protocol']})" for r in others
        )
    notes = [f"- {r['judge']}: {r['note']}" for r in bench.references if r.get("note")]
    headline = ""
    if metrics.get("reading") == "cal.py":
        headline = (
            f"Headline: cal.py's reading at k = {metrics['headline_k']} (of {metrics['calls_per_item']} calls per "
            "item; the k table below has the others). Majority over all calls: overall "
            f"{_fmt(metrics.get('all_calls_overall_accuracy'))}, macro {_fmt(metrics.get('all_calls_macro_accuracy'))}."
        )
    elif metrics.get("reading") == "all-calls":
        headline = f"Headline: the majority over all {metrics['calls_per_item']} calls per item (all-calls reading)."
    elif metrics.get("reading") == "lmms-eval":
        headline = (
            f"Headline: lmms-eval 0.7.3's vlreward_score {_fmt(metrics.get('lmms_eval_score'))} (the macro average "
            "over its categories, every item in the denominator; the groups below are its categories). "
            f"{metrics['lmms_eval_coin_flips']} coin flips (at their expected value: "
            f"{_fmt(metrics.get('lmms_eval_score_coin_expected'))}), {metrics['lmms_eval_llm_read']} replies read by a "
            f"model, {metrics['lmms_eval_other_number']} naming neither answer."
        )
    lines = [
        f"# {bench.title}: {judge_name}",
        "",
        f"Protocol: {protocol}",
        *(["", headline] if headline else []),
        "",
        label + ".",
        "",
        markdown_table(headers, rows),
        *(["", *notes] if notes else []),
        *_provenance_lines(metrics),
        *_uncertainty_lines(bench, metrics, groups + summary),
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
            (k[len("consistency_") :], v)
            for k, v in sorted(metrics.items())
            if k.startswith("consistency_") and k != "consistency_undetermined"
        ]
        lines += [
            "",
            "## Order consistency",
            "",
            "Share of all items whose display orders gave the same choice; an item with fewer than two parsed "
            f"orders counts as not consistent ({metrics.get('consistency_undetermined', 0)} such item(s)).",
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
            "cal.py's k-curve: its seeded shuffle, each item decided by the majority of its first k shuffled calls.",
            "",
            markdown_table(
                ["k", "overall", "macro"],
                [[k, _pct(metrics[f"overall_accuracy_k{k}"]), _pct(metrics.get(f"macro_accuracy_k{k}"))] for k in ks],
            ),
        ]
    if metrics.get("no_majority"):
        lines += ["", f"{metrics['no_majority']} item(s) had no majority outcome over their calls (left out)."]
    if metrics.get("llm_parsed_calls"):
        lines += ["", f"{metrics['llm_parsed_calls']} call(s) the regex missed were read by the --llm-parse model."]
    write_text_atomic(out / "report.md", "\n".join(lines) + "\n")

    series = {f"{judge_name} (this run)": {label: _pct(metrics.get(k)) for label, k in groups + summary}}
    for ref in bench.references:
        values = {label: ref.get(label) for label, _ in groups + summary}
        if any(v is not None for v in values.values()):
            series[ref["judge"]] = values
    bar_chart(out / f"{bench.name}_accuracy.png", series, title=f"{bench.title}: accuracy by category")


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


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
    engine: Executor | None = None,
    after: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None,
    settings: Mapping[str, Any] | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Predict (resuming from `out/predictions.jsonl`), score, and write the report; returns the metrics.

    `settings` (what shapes the predictions: judge or model, protocol) are recorded beside the predictions, and
    a rerun with others over predictions already written is refused (`jobs.resumable.SettingsChanged`);
    `overwrite` discards them and predicts every item again.

    `after(rows)`, when given, amends the finished rows before scoring (e.g. `--llm-parse`) and they are
    written back. The items' `provenance` (see `PairItems`) goes into `metrics.json`.

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
        settings=settings,
        overwrite=overwrite,
    )
    if after is not None:
        rows = after(rows)
        write_jsonl_atomic(Path(out) / "predictions.jsonl", rows)
    metrics = bench.score(items, rows) | getattr(items, "provenance", {})
    report_pairwise(bench, metrics, out, judge_name=judge_name, protocol=protocol)
    return metrics

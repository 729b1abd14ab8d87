"""Judge GRPO's gain against the describer's error rate: the curve of `judge_grpo_gain --traces distilled` runs.

Each run folder is one point (its `result.json`; the rate is the one the run was made with). For every point:
`grpo_gain` with its paired interval, and the SFT judge's and the more-SFT control's accuracy (`heldout_sft`,
`heldout_sft_more`), each with a 95 % interval: a bootstrap over the run's pairs where it saved them
(`credits.json`), else the normal approximation over its `report_pairs` (said in `interval`). The rate the
held-out run is made at is chosen on such a curve of `--report dev` runs, never on the held-out set.

    python -m benchmarks.judge_grpo_curve runs/dev-0 runs/dev-0.1 runs/dev-0.2 runs/dev-0.3 --out runs/curve

Prints one JSON line; writes `curve.png`.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from benchmarks.kit import emit, rounded
from benchmarks.workers import paired_bootstrap


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.judge_grpo_curve", description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="judge_grpo_gain output folders, one per error rate")
    parser.add_argument("--out", type=Path, default=Path("runs/judge_grpo_curve"))
    parser.add_argument("--bootstrap", type=int, default=2000)
    return parser.parse_args(argv)


def _interval(run: Path, result: dict[str, Any], arm: str, resamples: int) -> tuple[list[float] | None, str]:
    """An arm's accuracy interval: bootstrapped from the run's per-pair credits, else the normal approximation."""
    saved = run / "credits.json"
    if saved.is_file():
        credits = json.loads(saved.read_text())
        values = credits.get({"heldout_sft": "sft", "heldout_sft_more": "sft_more"}[arm])
        if values:
            return list(paired_bootstrap([0.0] * len(values), [values], resamples, 0)), "bootstrap"
    p, n = result.get(arm), result["report_pairs"]
    if p is None:
        return None, "none"
    half = 1.96 * math.sqrt(p * (1 - p) / n)
    return [p - half, p + half], "normal"


def point(run: Path, resamples: int) -> dict[str, Any]:
    result = json.loads((run / "result.json").read_text())
    rate = result.get("describe_error_rate") or {"set": 0.0, "measured": 0.0}
    sft, how = _interval(run, result, "heldout_sft", resamples)
    more, _ = _interval(run, result, "heldout_sft_more", resamples)
    return {
        "run": str(run),
        "report_set": result["report_set"],
        "traces": result.get("traces", "exact"),
        "rate_set": rate["set"],
        "rate_measured": rate["measured"],
        "traces_false_fact_share": (result.get("traces_false_fact_share") or {}).get("sft"),
        "grpo_gain": result["grpo_gain"],
        "grpo_gain_ci95": [result["grpo_gain_ci95_low"], result["grpo_gain_ci95_high"]],
        "heldout_sft": result["heldout_sft"],
        "heldout_sft_ci95": sft,
        "heldout_sft_more": result["heldout_sft_more"],
        "heldout_sft_more_ci95": more,
        "heldout_grpo": result["heldout_grpo"],
        "grpo_vs_sft_more": result["grpo_vs_sft_more"],
        "image_flaws_sft": result.get("image_flaws_sft"),
        "image_flaws_grpo": result.get("image_flaws_grpo"),
        "seeds": result["seeds"],
        "report_pairs": result["report_pairs"],
        "interval": how,
    }


def plot(path: Path, points: list[dict[str, Any]]) -> Path:
    from eval.plots import saved_figure

    with saved_figure(path, figsize=(11, 4), ncols=2) as (fig, (left, right)):
        xs = [p["rate_set"] for p in points]
        for key, label in (
            ("heldout_sft", "SFT on distilled traces"),
            ("heldout_sft_more", "+ more SFT (same traces)"),
        ):
            ys = [p[key] for p in points]
            lows = [y - (p[f"{key}_ci95"] or [y, y])[0] for y, p in zip(ys, points)]
            highs = [(p[f"{key}_ci95"] or [y, y])[1] - y for y, p in zip(ys, points)]
            left.errorbar(xs, ys, yerr=[lows, highs], marker="o", capsize=3, label=label)
        left.plot(xs, [p["heldout_grpo"] for p in points], marker="s", label="+ GRPO (mean of seeds)")
        left.set_xlabel("describer's per-fact error rate"), left.set_ylabel("accuracy (both orders; undecided 0.5)")
        left.legend(fontsize=8)
        gains = [p["grpo_gain"] for p in points]
        right.errorbar(
            xs,
            gains,
            yerr=[[g - p["grpo_gain_ci95"][0] for g, p in zip(gains, points)],
                  [p["grpo_gain_ci95"][1] - g for g, p in zip(gains, points)]],
            marker="o", capsize=3, label="grpo_gain (paired 95 % interval)",
        )  # fmt: skip
        right.axhline(0, c="grey", lw=0.8), right.axhline(0.02, ls=":", c="grey", label="goal +0.02")
        (
            right.set_xlabel("describer's per-fact error rate"),
            right.set_ylabel("GRPO − SFT accuracy"),
            right.legend(fontsize=8),
        )
        fig.suptitle(
            f"Judge GRPO on distilled traces, {points[0]['report_set']} set ({points[0]['report_pairs']} pairs)"
        )
    return path


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    points = sorted((point(run, args.bootstrap) for run in args.runs), key=lambda p: p["rate_set"])
    args.out.mkdir(parents=True, exist_ok=True)
    png = plot(args.out / "curve.png", points)
    result = rounded({"benchmark": "judge_grpo_curve", "points": points, "plot": str(png)})
    (args.out / "result.json").write_text(json.dumps(result, indent=1))
    emit(result)
    return result


if __name__ == "__main__":
    main()

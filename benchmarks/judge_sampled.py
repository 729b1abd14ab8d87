"""Did judge GRPO raise its own objective? Each judge of a `judge_grpo_gain` run, sampled as GRPO samples it.

GRPO maximises the reward of answers *sampled* at its temperature; the gain benchmark scores *greedy* verdicts.
This one separates the two. For every judge of the run (the SFT judge, each GRPO seed, the more-SFT control)
and every pair the run reported on (its dev or held-out pairs, rebuilt and checked against its
`credits.json`), it samples each display order `--samples` times at `--temperature` (default: the run's GRPO
temperature) and reports:

- `sampled`: the share of sampled calls that chose the right answer (GRPO's accuracy reward, an unparsed call
  earning 0), overall and by flaw evidence (image, text);
- `majority`: the majority of all those calls, scored as the gain benchmark scores a verdict;
- `one_answer_share`: pairs whose calls all agree (a GRPO group with no signal);
- `greedy`: the run's own greedy figure for that judge (read from `credits.json`, not recomputed);
- `sampled_gain` for each judge but SFT: its `sampled` minus SFT's, with a 95 % paired bootstrap interval.

If GRPO's `sampled` rises on pairs it never trained on, RL did its job and the question is why greedy decoding
does not show it; if it does not rise, RL did not learn what its reward asks for.

    python -m benchmarks.judge_sampled runs/judge_grpo_gain --samples 8     # writes runs/judge_grpo_gain/sampled/

Prints one JSON line; writes `sampled.json` and `sampled.png` in `--out` (default RUN/sampled). 130–175 s a
judge on 396 dev pairs at 8 samples an order (2 quiet cores). Measured: docs/learning.md, "Why GRPO does not move
this judge".
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import judge_grpo_gain
from benchmarks.kit import emit, rounded
from benchmarks.workers import paired_bootstrap
from tiny_world.demo.runner import demo_judge, demo_recipe
from tiny_world.heldout import UNDECIDED_CREDIT, evidence_of

EVIDENCE = ("image", "text")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.judge_sampled", description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a judge_grpo_gain output folder (result.json, credits.json, pool/)")
    parser.add_argument("--out", type=Path, help="where sampled.json and sampled.png go (default: RUN/sampled)")
    parser.add_argument("--samples", type=int, default=8, help="sampled calls per display order (GRPO's group size)")
    parser.add_argument("--temperature", type=float, help="sampling temperature (default: the run's GRPO temperature)")
    parser.add_argument("--batch-size", type=int, default=4, help="pairs per backend call")
    parser.add_argument("--bootstrap", type=int, default=2000, help="bootstrap resamples")
    args = parser.parse_args(argv)
    if args.samples < 1:
        parser.error(f"--samples ({args.samples}) must be at least 1")
    return args


def run_judges(run: Path, result: dict[str, Any], credits: dict[str, Any], demo: Path) -> dict[str, tuple[Path, list]]:
    """Each judge of the run that still has its folder, with its greedy credits from `credits.json`."""
    judges = {"sft": (demo_judge(demo, "sft"), credits["sft"])}
    for seed, greedy in zip(result["seeds"], credits["grpo"]):
        if (run / f"grpo-{seed}").is_dir():
            judges[f"grpo-{seed}"] = (run / f"grpo-{seed}", greedy)
    if credits.get("sft_more") and (run / "sft-more").is_dir():
        judges["sft_more"] = (run / "sft-more", credits["sft_more"])
    return judges


def sampled_credits(pairs: list[Any], verdicts: list[Any]) -> tuple[list[float], list[float], list[bool]]:
    """Per pair: the share of its calls that chose the label (unparsed: 0), the majority verdict's credit
    (undecided: one half), and whether every call gave the same answer."""
    shares, majority, agree = [], [], []
    for pair, verdict in zip(pairs, verdicts):
        votes = verdict.votes
        shares.append(sum(vote == pair.label for vote in votes) / len(votes))
        majority.append(UNDECIDED_CREDIT if verdict.choice is None else float(verdict.choice == pair.label))
        agree.append(len(set(votes)) == 1)
    return shares, majority, agree


def mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def judge_figures(
    pairs: list[Any], greedy: list[float], shares: list[float], majority: list[float], agree: list[bool]
) -> dict[str, float | None]:
    """One judge's figures from its per-pair credits: overall, and by the evidence a pair's flaw needs."""
    by = {e: [i for i, p in enumerate(pairs) if evidence_of(p.meta["flaw"]) == e] for e in EVIDENCE}
    return {
        "greedy": mean(greedy),
        "sampled": mean(shares),
        "majority": mean(majority),
        "one_answer_share": mean([float(a) for a in agree]),
        **{f"greedy_{e}": mean([greedy[i] for i in idx]) for e, idx in by.items()},
        **{f"sampled_{e}": mean([shares[i] for i in idx]) for e, idx in by.items()},
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    began = time.perf_counter()
    run = args.run
    for name in ("result.json", "credits.json", "pool/pool.json"):
        if not (run / name).is_file():
            raise SystemExit(f"{run / name}: missing; RUN must be a finished `benchmarks.judge_grpo_gain` folder")
    result = json.loads((run / "result.json").read_text())
    credits = json.loads((run / "credits.json").read_text())
    key = json.loads((run / "pool" / "pool.json").read_text())["key"]
    demo = Path(key["demo"])
    recipe = demo_recipe(demo)
    gain_args = judge_grpo_gain.parse_args(
        ["--demo", str(demo), "--out", str(run), "--report", result["report_set"]]
        + ["--pool-n", str(key["pool_n"]), "--dev-fraction", str(key["dev_fraction"])]
        + ["--heldout-n", str(result["report_pairs"])]
    )
    _, pairs = judge_grpo_gain.report_set(recipe, demo, gain_args)
    if [pair.id for pair in pairs] != credits["ids"]:
        raise SystemExit(f"{run}: the rebuilt {result['report_set']} pairs are not the run's (credits.json ids differ)")
    temperature = result["grpo"]["temperature"] if args.temperature is None else args.temperature
    if temperature <= 0 and args.samples > 1:
        raise SystemExit(f"--temperature {temperature}: sampling {args.samples} calls needs a temperature above 0")
    out = args.out or run / "sampled"
    out.mkdir(parents=True, exist_ok=True)

    judges, shares_of = {}, {}
    for name, (model, greedy) in run_judges(run, result, credits, demo).items():
        start = time.perf_counter()
        judge = recipe.judge(
            model, image_root=None, batch_size=args.batch_size, samples=args.samples, temperature=temperature
        )
        verdicts = judge.select(pairs)
        del judge
        shares, majority, agree = sampled_credits(pairs, verdicts)
        shares_of[name] = shares
        judges[name] = {**judge_figures(pairs, greedy, shares, majority, agree), "wall_s": time.perf_counter() - start}
        print(f"{name}: {rounded(judges[name], 3)}", file=sys.stderr, flush=True)

    base = shares_of["sft"]
    gains = {}
    for name, shares in shares_of.items():
        if name != "sft":
            low, high = paired_bootstrap(base, [shares], args.bootstrap, recipe.seed)
            gains[name] = {"gain": mean(shares) - mean(base), "ci95": [low, high]}
    grpo = [name for name in shares_of if name.startswith("grpo-")]
    if grpo:
        low, high = paired_bootstrap(base, [shares_of[name] for name in grpo], args.bootstrap, recipe.seed)
        gains["grpo"] = {"gain": mean([judges[n]["sampled"] for n in grpo]) - mean(base), "ci95": [low, high]}
    figures = rounded(
        {
            "benchmark": "judge_sampled",
            "run": str(run),
            "report_set": result["report_set"],
            "pairs": len(pairs),
            "temperature": temperature,
            "samples_per_order": args.samples,
            "judges": judges,
            "sampled_gain": gains,
            "wall_s": time.perf_counter() - began,
        }
    )
    (out / "sampled.json").write_text(json.dumps(figures, indent=1))
    plot(out / "sampled.png", judges, f"{len(pairs)} {result['report_set']} pairs, T {temperature}")
    emit(figures)
    return figures


def plot(path: Path, judges: dict[str, dict[str, Any]], where: str) -> Path:
    from eval.plots import bar_chart

    def pct(value: float | None) -> float | None:
        return None if value is None else 100 * value

    series = {
        "greedy": {name: pct(f["greedy"]) for name, f in judges.items()},
        "sampled": {name: pct(f["sampled"]) for name, f in judges.items()},
        "sampled, image flaws": {name: pct(f["sampled_image"]) for name, f in judges.items()},
    }
    # Headroom above 100 %, so that the legend sits over the bars rather than on them.
    return bar_chart(path, series, title=f"Greedy and sampled accuracy by judge ({where})", ylim=(0, 118))


if __name__ == "__main__":
    main()

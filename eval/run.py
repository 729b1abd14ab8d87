"""What `mrjudge eval` runs: a benchmark's items, then a judge (mc mode), a model under the official protocol,
or a predictions file, scored into a run folder. The command only turns flags into these calls.

    bench, items = load_pairwise("vl-rewardbench", "test.parquet")
    metrics = run_pairwise_benchmark(bench, items, Path("runs/vlrb"), Scoring(seed=0), predictions=Path("p.jsonl"))
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

__all__ = [
    "Official",
    "Scoring",
    "load_pairwise",
    "mmvet_candidates",
    "official_config",
    "run_pairwise_benchmark",
    "run_settings",
]


@dataclass
class Scoring:
    """How a pairwise run is scored (VL-RewardBench's reading options; Multimodal RewardBench uses `seed`)."""

    seed: int = 0
    """Seeds the bootstrap intervals (and the judge's orders and sampling)."""
    reading: str = "cal.py"
    """Official calls: cal.py's seeded shuffle and first k calls, all-calls (the majority of all), or lmms-eval
    (one reply per item, read as lmms-eval 0.7.3 does)."""
    headline_k: int | None = None
    """cal.py reading: the k of the headline figure (default: the largest cal.py k not above `k`)."""
    k: int = 10
    """Official mode: calls per item."""
    llm_parse: Any = None
    """A backend that reads the official replies the regex missed (None: none)."""

    def __post_init__(self) -> None:
        from eval.vl_rewardbench.calpy import CALPY_KS

        k = self.headline_k
        if k is not None and (k not in CALPY_KS or k > self.k):
            raise ValueError(f"--headline-k {k}: cal.py reports k in {CALPY_KS}, at most --k {self.k}")


@dataclass
class Official:
    """The official protocol's decoding: the flags given (None: the protocol's own default)."""

    temperature: float | None = None
    max_new_tokens: int | None = None
    top_p: float | None = None
    """VL-RewardBench only."""


def load_pairwise(
    benchmark: str,
    data: str | Path,
    *,
    limit: int | None = None,
    revision: str | None = None,
    image_folder: Any = None,
    max_bad_fraction: float = 0.0,
) -> tuple[Any, list[Any]]:
    """The benchmark's module (`eval.vl_rewardbench` or `eval.multimodal_rewardbench`) and its items (bad rows
    up to `max_bad_fraction` skipped: `items.skipped`)."""
    options = dict(limit=limit, image_folder=image_folder, max_bad_fraction=max_bad_fraction)
    if benchmark == "vl-rewardbench":
        from eval import vl_rewardbench as bench

        return bench, bench.load_vl_rewardbench(data, revision=revision, **options)
    from eval import multimodal_rewardbench as bench

    return bench, bench.load_multimodal_rewardbench(data, **options)


def _scoring(bench: Any, scoring: Scoring) -> tuple[Any, Any]:
    """The benchmark with this run's scoring options, and the `llm_parse` reader for finished rows (or None)."""
    if bench.BENCHMARK.name != "vl_rewardbench":
        return dataclasses.replace(bench.BENCHMARK, score=partial(bench.score, seed=scoring.seed)), None
    score = partial(bench.score, reading=scoring.reading, headline_k=scoring.headline_k, seed=scoring.seed)
    after = partial(bench.llm_parse_rows, scoring.llm_parse) if scoring.llm_parse is not None else None
    return dataclasses.replace(bench.BENCHMARK, score=score), after


def run_pairwise_benchmark(
    bench: Any,
    items: Any,
    out: Path,
    scoring: Scoring,
    *,
    predictions: Path | None = None,
    judge: Any = None,
    model: Any = None,
    official: Official | None = None,
    judge_name: str | None = None,
    batch_size: int = 8,
    show_progress: bool = True,
    engine: Any = None,
    overwrite: bool = False,
) -> tuple[str, dict[str, Any]]:
    """Score `predictions`, or run the MC `judge` (an `eval.workers.JudgeSpec`), or `model` (a `ModelSpec`)
    under the official protocol with `official` decoding; returns the benchmark's title and its metrics.

    Every run writes predictions.jsonl, metrics.json, report.md and the charts into `out`. A model run records
    what shapes its predictions (`run_settings`); rerun into `out` with others, it is refused unless `overwrite`.
    """
    from eval.common import read_decisions
    from eval.pairwise_run import report_pairwise, run_pairwise
    from eval.workers import mc_work, official_work

    spec, after = _scoring(bench, scoring)
    vlrb = bench.BENCHMARK.name == "vl_rewardbench"
    if predictions is not None:
        lmms_eval = vlrb and scoring.reading == "lmms-eval"
        rows = read_decisions(predictions, replies=lmms_eval)
        rows = after(rows) if after else rows
        metrics = spec.score(items, rows) | items.provenance
        kind = "file" if not any("calls" in r for r in rows) else f"file with official calls, {scoring.reading} reading"
        if lmms_eval:
            kind = "file of replies, read as lmms-eval 0.7.3's vl_rewardbench task reads them"
        report_pairwise(spec, metrics, out, judge_name=predictions.name, protocol=bench.protocol(kind))
        return spec.title, metrics
    common = dict(
        batch_size=batch_size, judge_name=judge_name, show_progress=show_progress, engine=engine, overwrite=overwrite
    )
    if judge is not None:
        work, protocol = mc_work(judge), bench.protocol("mc", orders=judge.config.orders or 2)
        settings = run_settings(bench, judge=judge)
        return spec.title, run_pairwise(spec, items, out, work, protocol=protocol, settings=settings, **common)
    config = official_config(bench, scoring, official)
    protocol = bench.protocol("official", config, **({"reading": scoring.reading} if vlrb else {}))
    work = official_work(bench.official_predict, model, config)
    settings = run_settings(bench, model=model, official=config)
    return spec.title, run_pairwise(spec, items, out, work, protocol=protocol, after=after, settings=settings, **common)


def official_config(bench: Any, scoring: Scoring, official: Official | None) -> Any:
    """The benchmark's official-protocol config (`VLRBConfig` / `MMRBConfig`): its defaults, then the
    decoding given, seeded by the scoring seed."""
    official = official or Official()
    vlrb = bench.BENCHMARK.name == "vl_rewardbench"
    overrides: dict[str, Any] = {"seed": scoring.seed}
    for name in ("temperature", "max_new_tokens") + (("top_p",) if vlrb else ()):
        if getattr(official, name) is not None:
            overrides[name] = getattr(official, name)
    return bench.VLRBConfig(k=scoring.k, **overrides) if vlrb else bench.MMRBConfig(**overrides)


def run_settings(bench: Any, *, judge: Any = None, model: Any = None, official: Any = None) -> dict[str, Any]:
    """What shapes a benchmark run's predictions: the benchmark and mode, then the MC judge's settings
    (`JudgeSpec.settings`), or the official protocol's model and decoding."""
    if judge is not None:
        return {"benchmark": bench.BENCHMARK.name, "mode": "mc", **judge.settings()}
    return {
        "benchmark": bench.BENCHMARK.name,
        "mode": "official",
        "model": model.settings(),
        "protocol": dataclasses.asdict(official),
    }


def mmvet_candidates(
    questions: Any,
    out: Path,
    *,
    files: list[Path] | None = None,
    policy: Any = None,
    n: int = 4,
    temperature: float = 0.7,
    max_new_tokens: int = 512,
    seed: int = 0,
    batch_size: int = 8,
    show_progress: bool = True,
    engine: Any = None,
    overwrite: bool = False,
) -> dict[str, list[str]]:
    """MM-Vet best-of-N's candidates: read from N prediction `files`, or `n` sampled from `policy` (a
    `ModelSpec`; resumable through `out/candidates.jsonl`, then saved as N files in `out`; `overwrite`
    samples them all again)."""
    from eval import mmvet

    if files:
        return mmvet.load_candidates(files, questions)
    candidates = mmvet.generate_candidates(
        policy,
        questions,
        n,
        temperature=temperature,
        max_new_tokens=max_new_tokens,
        seed=seed,
        batch_size=batch_size,
        cache_path=out / "candidates.jsonl",
        show_progress=show_progress,
        engine=engine,
        overwrite=overwrite,
    )
    mmvet.save_candidates(candidates, out)
    return candidates

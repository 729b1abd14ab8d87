"""`mrjudge synth all`: every stage, one after the other, into one folder (the input, records, or the world)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from data_synthesis.assemble import AssembleConfig
from data_synthesis.pipeline.assemble import run_assemble
from data_synthesis.pipeline.config import SynthConfig, engine_of, spec_of
from data_synthesis.pipeline.describe import run_describe
from data_synthesis.pipeline.distill import run_distill
from data_synthesis.pipeline.negatives import run_negatives
from jobs.jsonl import write_json_atomic

__all__ = ["run_all"]


def _records_stage(config: SynthConfig, out: Path) -> dict[str, Any]:
    """`write_records` with the config's source options; a finished run with the same options is kept as it is
    (re-checking every image of a 665k-row set takes a while, and its result would be the same)."""
    import json

    from data_synthesis.sources import FieldMap, record_options, write_records

    options = record_options(config)
    source = Path(config.source).expanduser()
    stamp = [source.stat().st_size, source.stat().st_mtime_ns] if source.is_file() else None  # an edited file reruns
    wanted = {"source": str(config.source), "source_file": stamp, "fields": dict(config.fields), **options}
    summary_path = out / "records.summary.json"
    if summary_path.exists() and (out / "records.jsonl").exists():
        summary = json.loads(summary_path.read_text())
        if summary.get("options") == wanted:
            return summary
    fields = FieldMap(**config.fields)
    _, summary = write_records(config.source, out, fields=fields, image_workers=config.image_workers, **options)
    summary["options"] = wanted
    write_json_atomic(summary_path, summary)
    return summary


def run_all(config: SynthConfig, *, show_progress: bool = True, overwrite: bool = False) -> dict[str, Any]:
    """Run every stage into `config.out`; finished stages resume (skip their done ids, retry failed rows).

    A stage whose settings changed since its rows were written is refused (`jobs.resumable.SettingsChanged`);
    `overwrite` starts every per-row stage (negatives, describe, distill) over instead.

    A stage with more failed rows than `max_failed_fraction` raises `TooManyFailures`. Fewer failed rows
    in negatives or describe stop the chain before assemble (`held_back` in the summary; run again to
    retry them) unless `assemble_with_failures`.
    """
    out = Path(config.out)
    summaries: dict[str, Any] = {}
    if config.source is None:
        from data_synthesis.world import write_world

        write_world(config.world_n, config.world_seed, out)
    else:
        summaries["records"] = _records_stage(config, out)
    common = dict(
        batch_size=config.batch_size,
        show_progress=show_progress,
        engine=engine_of(config),
        concurrency=config.concurrency,
        max_failed_fraction=config.max_failed_fraction,
        overwrite=overwrite,
    )

    def per_row(stage: Callable[..., tuple[list, dict[str, Any]]], **options: Any) -> dict[str, Any]:
        """The summary of a per-row stage run from `out` into `out` with the chain's run options."""
        return stage(out, out, **options, **common)[1]

    mllm = spec_of(config.model)  # one spec (so one loaded model) for negatives and descriptions
    summaries["negatives"] = per_row(
        run_negatives,
        generator=config.negatives_generator,
        model=mllm,
        n=config.negatives_n,
        seed=config.seed,
        max_attempts=config.negatives_max_attempts,
        max_new_tokens=config.negatives_max_new_tokens,
        sampling=config.generator_sampling,
    )
    summaries["described"] = per_row(
        run_describe,
        describer=config.describer,
        model=mllm,
        max_new_tokens=config.describe_max_new_tokens,
        sampling=config.describer_sampling,
    )
    failed = {stage: summaries[stage]["failed"] for stage in ("negatives", "described") if summaries[stage]["failed"]}
    if failed and not config.assemble_with_failures:
        summaries["held_back"] = (
            f"failed rows in {failed}: assemble and distill wait for them; run the same command again to retry "
            "them (or set assemble_with_failures: true)"
        )
        print(f"synth all: {summaries['held_back']}", file=sys.stderr)
        write_json_atomic(out / "synth.summary.json", summaries)
        return summaries
    assembly = AssembleConfig(**{"seed": config.seed, **config.assemble})
    summaries["items"] = run_assemble(out, out, assembly, engine=common["engine"])[1]
    summaries["distilled"] = per_row(
        run_distill,
        reasoner=config.reasoner,
        reasoner_style=config.reasoner_style,
        reasoner_model=spec_of(config.reasoner_model),
        rewriter=config.rewriter,
        rewriter_model=spec_of(config.rewriter_model),
        reasoner_sampling=config.reasoner_sampling,
        rewriter_sampling=config.rewriter_sampling,
    )
    write_json_atomic(out / "synth.summary.json", summaries)
    return summaries

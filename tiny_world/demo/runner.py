"""Run the demo's stages in order, resumably, and write the summary (terminal table, summary.json, report.md).

A stage that finishes writes `OUT/<stage>/stage.json` atomically: its wall time, its key figures and a hash
of its inputs — the config fields it reads and the hashes of the stages it builds on. A re-run skips every
stage whose `stage.json` holds the hash it would have now ("done earlier"); any other stage's folder is
wiped and the stage runs from scratch, so a changed budget re-runs exactly that stage and those after it
that read its output, and a stage killed half-way starts over. A stage reads the config through a window
that answers only the fields its hash covers (`tiny_world.demo.stages.hashed`), so no field it reads can be
left out of its hash. The summary (`tiny_world.demo.summary`) is rebuilt from the `stage.json` files on
every run, so it is the same whether the stages ran now or earlier.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from jobs.jsonl import write_json_atomic, write_text_atomic
from tiny_world.demo.config import DemoConfig
from tiny_world.demo.stages import STAGES, HashedConfig, Stage, StageContext, hashed_fields
from tiny_world.demo.summary import print_summary, report_markdown, summarize
from tiny_world.recipe import TinyJudgeRecipe

__all__ = ["demo_judge", "demo_recipe", "demo_stage_hash", "run_demo", "run_stages", "stage_hash"]

STAGE_FILE = "stage.json"


def stage_hash(stage: Stage, config: DemoConfig, upstream: dict[str, str]) -> str:
    """A stable hash of what the stage's output depends on: its config fields and its inputs' hashes."""
    payload = {
        "stage": stage.name,
        "fields": {name: getattr(config, name) for name in stage.fields},
        "after": {name: upstream[name] for name in stage.after},
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _read_record(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def run_demo(config: DemoConfig, out: Path, console: Any = None) -> dict[str, Any]:
    """Run (or resume) every stage into `out`; write and return the summary.

    Args:
        config: the budgets.
        out: the demo folder; created if missing.
        console: a `rich.console.Console` for progress and the summary table; None runs silently.
    """
    start = time.perf_counter()
    records = run_stages(config, out, console)
    summary = summarize(config, records, run_wall_s=time.perf_counter() - start)
    write_json_atomic(out / "summary.json", summary)
    write_text_atomic(out / "report.md", report_markdown(summary, out))
    if console is not None:
        print_summary(summary, console, out)
    return summary


@contextmanager
def _training_session(config: DemoConfig) -> Iterator[None]:
    """Set torch's threads and hide the libraries' per-model 'Loading weights' and per-dataset 'Map' bars
    (the stages draw their own progress); entered only when a stage runs, so a resumed demo imports no torch."""
    import warnings

    import datasets
    import torch
    import transformers

    warnings.filterwarnings("ignore", category=FutureWarning)  # deprecations inside the libraries, not ours
    threads = torch.get_num_threads()
    if config.threads:
        torch.set_num_threads(config.threads)
    verbosity = transformers.logging.get_verbosity()
    transformers.utils.logging.disable_progress_bar()
    transformers.logging.set_verbosity_error()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        transformers.utils.logging.enable_progress_bar()
        transformers.logging.set_verbosity(verbosity)
        datasets.enable_progress_bars()


def run_stages(
    config: DemoConfig, out: Path, console: Any = None, *, until: str | None = None
) -> dict[str, dict[str, Any]]:
    """Run (or resume) the stages in order into `out`, up to and including `until` (default: all); return
    each stage's record. Benchmarks that start from the demo's SFT judge stop at `until="sft"`."""
    names = [stage.name for stage in STAGES]
    if until is not None and until not in names:
        raise ValueError(f"until must be one of {names}, got {until!r}")
    stages = STAGES[: names.index(until) + 1] if until else STAGES
    out.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        return _run_stages(config, out, console, stack, stages)


def demo_recipe(out: Path) -> TinyJudgeRecipe:
    """The judge recipe a demo folder was made with, read back from its stages' recorded inputs (the stages
    from `world` to `sft` must be done; `pool` and `grpo` are read too when they are): benchmarks that start
    from a demo's judge train on its terms."""
    names = [stage.name for stage in STAGES]
    values: dict[str, Any] = {}
    for stage in STAGES[: names.index("grpo") + 1]:
        record = _read_record(out / stage.name / STAGE_FILE)
        if record is None and names.index(stage.name) <= names.index("sft"):
            raise ValueError(f"{out} has no finished `{stage.name}` stage: run `mrjudge demo --out {out}` first")
        values.update(record["inputs"] if record else {})
    return TinyJudgeRecipe(**{k: v for k, v in values.items() if k in TinyJudgeRecipe.__dataclass_fields__})


def demo_judge(out: Path, stage: str = "grpo") -> Path:
    """The judge model a demo folder's `stage` (sft or grpo) ended with (GRPO skipped: the SFT judge)."""
    record = _read_record(out / stage / STAGE_FILE)
    if record is None:
        raise ValueError(f"{out} has no finished `{stage}` stage: run `mrjudge demo --out {out}` first")
    return out / record["figures"]["model"]


def demo_figures(out: Path, stage: str) -> dict[str, Any]:
    """The figures a demo folder's finished `stage` recorded."""
    record = _read_record(out / stage / STAGE_FILE)
    if record is None:
        raise ValueError(f"{out} has no finished `{stage}` stage: run `mrjudge demo --out {out}` first")
    return record["figures"]


def demo_stage_hash(out: Path, stage: str) -> str:
    """The input hash a demo folder's finished `stage` recorded (it covers every stage it builds on): what a
    benchmark's cache of results made from that stage is keyed by, so a re-trained demo is not mistaken for
    the old one at the same path."""
    record = _read_record(out / stage / STAGE_FILE)
    if record is None:
        raise ValueError(f"{out} has no finished `{stage}` stage: run `mrjudge demo --out {out}` first")
    return record["hash"]


def _run_stages(
    config: DemoConfig, out: Path, console: Any, stack: ExitStack, stages: tuple[Stage, ...]
) -> dict[str, dict[str, Any]]:
    hashes: dict[str, str] = {}
    records: dict[str, dict[str, Any]] = {}
    session = False
    for index, stage in enumerate(stages, 1):
        hashes[stage.name] = digest = stage_hash(stage, config, hashes)
        folder = out / stage.name
        record = _read_record(folder / STAGE_FILE)
        if record is not None and record.get("hash") == digest:
            records[stage.name] = {**record, "status": "done earlier"}
            if console is not None:
                console.print(
                    f"[dim]{index}/{len(STAGES)} {stage.name}: done earlier ({record['wall_s']:.1f} s) — "
                    f"{stage.line(record['figures'])}[/]"
                )
            continue
        if not session:
            stack.enter_context(_training_session(config))
            session = True
        if folder.exists():
            shutil.rmtree(folder)  # stale (other inputs) or half-done: start the stage over
        folder.mkdir(parents=True)
        budget = stage.budget(config)
        if console is not None:
            console.rule(f"[bold]{index}/{len(STAGES)} {stage.name}[/]: {stage.title}")
            if budget:
                console.print(f"budget: {budget}")
        _seed(config.seed)
        began = time.perf_counter()
        try:
            window = HashedConfig(config, stage.name, hashed_fields(stage.name, STAGES))
            figures = stage.run(StageContext(window, out, folder, records, console))
        except Exception:
            if console is not None:
                console.print(
                    f"[red]✗ {stage.name} failed after {time.perf_counter() - began:.1f} s[/] — the stages before it "
                    "are kept; fix the cause and run the same command again to resume from this stage"
                )
            raise
        wall_s = time.perf_counter() - began
        record = {
            "stage": stage.name,
            "title": stage.title,
            "hash": digest,
            "inputs": {name: getattr(config, name) for name in stage.fields},
            "after": list(stage.after),
            "budget": budget,
            "wall_s": round(wall_s, 2),
            "figures": figures,
            "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        write_json_atomic(folder / STAGE_FILE, record)
        records[stage.name] = {**record, "status": "ran"}
        if console is not None:
            done = f"[green]✓ {stage.name}[/] {wall_s:.1f} s"
            console.print(f"{done}{f' (budget {budget})' if budget else ''} — {stage.line(figures)}")
    return records


def _seed(seed: int) -> None:
    """Each stage starts from the same RNG state whether earlier stages ran now or were resumed."""
    import random

    import torch

    random.seed(seed)
    torch.manual_seed(seed)

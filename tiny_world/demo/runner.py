"""Run the demo's stages in order, resumably, and write the summary (terminal table, summary.json, report.md).

A stage that finishes writes `OUT/<stage>/stage.json` atomically: its wall time, its key figures and a hash
of its inputs — the config fields it reads and the hashes of the stages it builds on. A re-run skips every
stage whose `stage.json` holds the hash it would have now ("done earlier"); any other stage's folder is
wiped and the stage runs from scratch, so a changed budget re-runs exactly that stage and those after it
that read its output, and a stage killed half-way starts over. The summary is rebuilt from the
`stage.json` files on every run, so it is the same whether the stages ran now or earlier.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from jobs.jsonl import write_json_atomic, write_text_atomic
from tiny_world.demo.config import DemoConfig
from tiny_world.demo.stages import STAGES, Stage, StageContext
from tiny_world.recipe import TinyJudgeRecipe

__all__ = ["demo_judge", "demo_recipe", "demo_stage_hash", "run_demo", "run_stages", "stage_hash", "summarize"]

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
            figures = stage.run(StageContext(config, out, folder, records, console))
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


# -- the summary -------------------------------------------------------------------------------------------


def summarize(config: DemoConfig, records: dict[str, dict[str, Any]], *, run_wall_s: float) -> dict[str, Any]:
    """The figures a reader wants first, then every stage's record; `total_wall_s` is the stages' own time."""
    figures = {name: record["figures"] for name, record in records.items()}
    heldout = {"untrained": figures["untrained"], "sft": figures["sft"], "grpo": figures["evaluate"]}
    accuracy = figures["evaluate"]["accuracy"]
    total = sum(record["wall_s"] for record in records.values())
    bon, pol = figures["best_of_n"], figures["policy"]
    return {
        "judge_heldout_accuracy": accuracy,
        "judge_heldout_goal": config.heldout_goal,
        "goal_met": accuracy is not None and accuracy >= config.heldout_goal,
        "total_wall_s": round(total, 1),
        "wall_budget_s": config.wall_budget_s,
        "within_budget": total <= config.wall_budget_s,
        "run_wall_s": round(run_wall_s, 1),
        "headline": {
            "heldout_accuracy": {k: f["accuracy"] for k, f in heldout.items()},
            "heldout_decided": {k: f"{f['decided']}/{f['n']}" for k, f in heldout.items()},
            "order_consistency": {k: f["consistency"] for k, f in heldout.items()},
            # The official scorer's reading (undecided items left out), for comparison with published tables.
            "vlrb_overall_accuracy": figures["evaluate"]["vlrb_accuracy"],
            "heldout_per_kind": figures["evaluate"]["per_kind"],
            "heldout_per_evidence": {k: f["per_evidence"] for k, f in heldout.items()},
            "heldout_per_flaw": figures["evaluate"]["per_flaw"],
            "heldout_flaw_counts": figures["evaluate"]["flaw_counts"],
            "best_of_n": {"n": bon["n"], **{k: bon[k] for k in ("first", "random", "judge", "oracle")}},
            "judge_grpo_gain": round(accuracy - figures["sft"]["accuracy"], 4),
            "policy_exact": {
                k: pol[k]
                for k in (
                    "exact_before",
                    "exact_after",
                    "gain",
                    "oracle_exact_after",
                    "oracle_gain",
                    "judge_gain_ratio",
                )
            },
        },
        "stages": {
            name: {k: record[k] for k in ("status", "wall_s", "budget", "hash", "figures")}
            for name, record in records.items()
        },
        "config": asdict(config),
    }


def _f(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _evidence(per_evidence: dict[str, float], kind: str) -> str:
    return _f(per_evidence.get(kind), 2)


def _headline_rows(summary: dict[str, Any]) -> list[tuple[str, str]]:
    h = summary["headline"]
    acc, cons, dec, ev = h["heldout_accuracy"], h["order_consistency"], h["heldout_decided"], h["heldout_per_evidence"]
    bon, pol = h["best_of_n"], h["policy_exact"]
    goal = summary["judge_heldout_goal"]
    counts = h["heldout_flaw_counts"]
    return [
        (
            "judge held-out accuracy: untrained / SFT / GRPO",
            f"{_f(acc['untrained'])} / {_f(acc['sft'])} / {_f(acc['grpo'])}  "
            f"(decided {dec['untrained']}, {dec['sft']}, {dec['grpo']}; an undecided pair counts 0.5)",
        ),
        (
            "judge_heldout_accuracy (VL-RewardBench format, mc)",
            f"{_f(summary['judge_heldout_accuracy'])} — "
            + (
                "goal not checked: the quick preset only shows that every stage runs (its budgets cannot teach)"
                if summary["config"].get("quick")
                else f"goal ≥ {goal:.2f}: " + ("met" if summary["goal_met"] else "not met")
            )
            + f"; official scorer (undecided left out) {_f(h['vlrb_overall_accuracy'])}",
        ),
        ("judge GRPO's gain over SFT (held-out accuracy)", f"{h['judge_grpo_gain']:+.3f}"),
        (
            "order consistency: untrained / SFT / GRPO",
            f"{_f(cons['untrained'], 2)} / {_f(cons['sft'], 2)} / {_f(cons['grpo'], 2)}",
        ),
        (
            "image flaws (need the picture): untrained / SFT / GRPO",
            f"{_evidence(ev['untrained'], 'image')} / {_evidence(ev['sft'], 'image')} / "
            f"{_evidence(ev['grpo'], 'image')}  (chance 0.50)",
        ),
        (
            "text flaws (the answer gives them away): untrained / SFT / GRPO",
            f"{_evidence(ev['untrained'], 'text')} / {_evidence(ev['sft'], 'text')} / {_evidence(ev['grpo'], 'text')}",
        ),
        (
            "held-out accuracy by flaw (pairs)",
            ", ".join(f"{k} {v:.2f} ({counts[k]})" for k, v in h["heldout_per_flaw"].items()) or "–",
        ),
        ("held-out accuracy by kind", ", ".join(f"{k} {v:.3f}" for k, v in h["heldout_per_kind"].items()) or "–"),
        (
            f"best-of-{bon['n']} (MM-Vet style): first / random / judge / oracle",
            f"{bon['first']:.3f} / {bon['random']:.3f} / {bon['judge']:.3f} / {bon['oracle']:.3f}",
        ),
        (
            "policy exact answers: before / after GRPO (judge reward) / after GRPO (answer key)",
            f"{_f(pol['exact_before'])} / {_f(pol['exact_after'])} / {_f(pol['oracle_exact_after'])}  (gain "
            f"{pol['gain']:+.3f} from the judge"
            + (
                f", {pol['oracle_gain']:+.3f} from the answer key: ratio {_f(pol['judge_gain_ratio'], 2)})"
                if pol["oracle_gain"] is not None
                else ")"
            ),
        ),
        (
            "total wall time (all stages)",
            f"{summary['total_wall_s']:.0f} s (budget {summary['wall_budget_s']:.0f} s"
            + ("" if summary["within_budget"] else ", OVER BUDGET")
            + f"); this run {summary['run_wall_s']:.0f} s",
        ),
    ]


def print_summary(summary: dict[str, Any], console: Any, out: Path) -> None:
    """The stage table and the headline figures, as rich tables."""
    from rich.table import Table

    stages = Table(title="mr-judge demo: stages", title_justify="left")
    for column, kwargs in (
        ("stage", {"no_wrap": True}),
        ("status", {"no_wrap": True}),
        ("wall s", {"justify": "right"}),
        ("key figures", {}),
    ):
        stages.add_column(column, **kwargs)
    for stage in STAGES:
        record = summary["stages"][stage.name]
        stages.add_row(stage.name, record["status"], f"{record['wall_s']:.1f}", stage.line(record["figures"]))
    stages.add_row("total", "", f"{summary['total_wall_s']:.1f}", "", style="bold")
    console.print(stages)
    headline = Table(title="mr-judge demo: summary", title_justify="left", show_header=False)
    headline.add_column("figure", no_wrap=True)
    headline.add_column("value")
    for name, value in _headline_rows(summary):
        headline.add_row(name, value)
    console.print(headline)
    console.print(f"summary.json and report.md → {out}")


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def report_markdown(summary: dict[str, Any], out: Path) -> str:
    """`report.md`: the headline figures, the stage table, every stage's plots and the sub-reports."""
    lines = [
        "# mr-judge demo",
        "",
        "The whole MR. Judge life cycle on the embedded synthetic world, on a CPU with no download: data synthesis "
        "(reverse negatives, reasoning distillation), a perception warm-up, warm-up SFT and GRPO of a tiny "
        "Qwen2.5-VL judge (the learning benchmark's recipe), evaluation (a VL-RewardBench-format held-out set, "
        "split into image flaws and text flaws; MM-Vet-style best-of-N), and the judge served on loopback as the "
        "reward of a short policy GRPO run.",
        "",
        "## Summary",
        "",
        "| figure | value |",
        "| --- | --- |",
        *[f"| {_md_escape(k)} | {_md_escape(v)} |" for k, v in _headline_rows(summary)],
        "",
        "## Stages",
        "",
        "| stage | status | wall s | budget | key figures |",
        "| --- | --- | ---: | --- | --- |",
    ]
    for stage in STAGES:
        record = summary["stages"][stage.name]
        lines.append(
            f"| {stage.name} | {record['status']} | {record['wall_s']:.1f} | {_md_escape(record['budget'] or '–')} | "
            f"{_md_escape(stage.line(record['figures']))} |"
        )
    lines += ["", "## Plots", ""]
    for stage in STAGES:
        for plot in summary["stages"][stage.name]["figures"].get("plots", []):
            if (out / plot).exists():
                lines += [f"**{stage.name}** — `{plot}`", "", f"![{stage.name}: {Path(plot).stem}]({plot})", ""]
    reports = [(s.name, summary["stages"][s.name]["figures"].get("report")) for s in STAGES]
    lines += ["## Reports", ""]
    lines += [f"- {name}: [{path}]({path})" for name, path in reports if path]
    lines += [
        "",
        "## Config",
        "",
        "```json",
        json.dumps(summary["config"], indent=1),
        "```",
        "",
    ]
    return "\n".join(lines)

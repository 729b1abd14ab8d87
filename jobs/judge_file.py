"""Judge a JSONL file of MC items into a JSONL file of verdicts: validated, resumable, atomic.

This is what `mrjudge judge` runs; it lives in the library so that evaluation and synthesis jobs reuse
the same resume and summary logic. A job takes a loaded `Judge`, or a `JudgeSpec` (the judge named, not
loaded) to run on an executor that builds it where the batches run: one judge per Ray actor.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from jobs.executor import BatchFn, Executor
from jobs.jsonl import Records, numbered_jsonl, read_records
from jobs.resumable import run_resumable
from judge.backends.spec import ModelSpec
from judge.images import ImageLoadError, check_decodes, default_image_workers
from judge.judging import Judge, JudgeConfig
from judge.types import DataError, MCItem, Verdict

__all__ = [
    "JudgeRunSummary",
    "JudgeSpec",
    "judge_config_settings",
    "judge_file",
    "judge_settings",
    "load_items",
    "select_work",
    "summarize",
]


@dataclass
class JudgeSpec:
    """A judge named, not loaded: the model, the judging settings and where relative image paths start."""

    model: ModelSpec
    config: JudgeConfig = field(default_factory=JudgeConfig)
    image_root: str | Path | None = None

    def build(self) -> Judge:
        """The judge over this spec's backend (the backend loads once per process and is reused)."""
        return Judge(self.model.build(), self.config, image_root=self.image_root)

    @property
    def name(self) -> str:
        return self.model.model

    def settings(self) -> dict[str, Any]:
        """What shapes this judge's verdicts: the model (`ModelSpec.settings`) and the judging settings (the
        image size once, as the JudgeConfig's)."""
        model = {k: v for k, v in self.model.settings().items() if k not in ("min_pixels", "max_pixels")}
        return {"model": model, "judge": judge_config_settings(self.config)}


def judge_config_settings(config: JudgeConfig) -> dict[str, Any]:
    """The JudgeConfig fields that shape verdicts: all but `batch_size` (how many items go per call), so a
    resumed run may change the batch size to fit memory."""
    return {k: v for k, v in asdict(config).items() if k != "batch_size"}


def judge_settings(judge: Judge | JudgeSpec) -> dict[str, Any]:
    """The settings record of a judging job (`jobs.resumable.check_settings`), for a spec or a loaded judge."""
    if isinstance(judge, JudgeSpec):
        return judge.settings()
    return {"model": {"backend": judge.backend.name}, "judge": judge_config_settings(judge.config)}


def _selector(spec: JudgeSpec) -> Callable[[Sequence[MCItem]], list[Verdict]]:
    return spec.build().select


def select_work(judge: Judge | JudgeSpec, engine: Executor | None = None) -> BatchFn:
    """MC items → verdicts: a loaded judge runs here; a spec is built where the batches run.

    A loaded judge cannot go to another engine (its model would be pickled into every task): pass a
    `JudgeSpec` there instead.
    """
    if isinstance(judge, JudgeSpec):
        return BatchFn.on_models(partial(_selector, judge), judge.model, name="select")
    if engine is not None and engine.name != "local":
        raise ValueError(f"a loaded Judge runs only on the local engine; give the {engine.name} engine a JudgeSpec")
    return BatchFn.of(judge.select, "select")


@dataclass
class JudgeRunSummary:
    """What a judging run did, for the terminal and for logs."""

    n_items: int
    n_judged_now: int
    n_skipped: int
    n_unparsed: int
    accuracy: float | None
    """Share of the labelled items the judge decided whose choice equals the label; `None` when it decided none.
    Undecided (unparsed) items leave the denominator and are counted in `n_unparsed`, as `mrjudge eval` does."""
    n_decided: int
    """Labelled items with a choice: the accuracy's denominator."""
    consistency: float | None
    """Share of items with a `consistent` flag whose flag is true."""
    wall_s: float
    items_per_s: float | None


def load_items(path: str | Path, *, check_images: bool = True, max_bad_fraction: float = 0.0) -> Records:
    """Read and validate an MC-item JSONL file; every bad line is reported with its number and field.

    With `check_images`, every image is decoded through to its end (relative paths are resolved against the
    file's folder), so a typo or a truncated file fails here, naming its line, before any model is loaded,
    rather than halfway through a run. With `max_bad_fraction` > 0, bad lines up to that share are skipped
    and listed in the result's `skipped` (`jobs.jsonl.parse_records`); more raise `InputError`.
    """
    base = Path(path).parent
    problems = _image_problems(path, base) if check_images else {}

    def parse(row: object, where: str) -> MCItem:
        item = MCItem.from_dict(row, where=where)
        for ref in item.images if check_images else ():
            problem = problems[ref] if isinstance(ref, str) and ref in problems else _decode_problem(ref, base)
            if problem is not None:
                raise DataError(
                    "image",
                    problem,
                    "fix or replace the image (relative paths are resolved against the JSONL file's folder), "
                    "or let --max-bad-fraction skip the line",
                    where,
                )
        return item

    return read_records(path, parse, max_bad_fraction=max_bad_fraction)


def _decode_problem(ref: Any, base: Path) -> str | None:
    try:
        check_decodes(ref, base)
    except ImageLoadError as exc:
        return str(exc)
    return None


def _image_problems(path: str | Path, base: Path) -> dict[str, str | None]:
    """Every image path or data URL the file names, decoded once each in a pool of threads (Pillow lets go of
    the GIL while it decodes): what is wrong with it, or None."""
    refs: set[str] = set()
    for _, row in numbered_jsonl(path):
        image = row.get("image") if isinstance(row, dict) else None
        refs.update(ref for ref in (image if isinstance(image, list) else [image]) if isinstance(ref, str))
    with ThreadPoolExecutor(max_workers=default_image_workers(), thread_name_prefix="images") as pool:
        return dict(zip(refs, pool.map(lambda ref: _decode_problem(ref, base), refs)))


def summarize(
    items: Sequence[MCItem], verdicts: Sequence[Verdict], *, n_judged_now: int, wall_s: float
) -> JudgeRunSummary:
    by_id = {v.id: v for v in verdicts}
    labelled = [(item, by_id[item.id]) for item in items if item.label is not None and item.id in by_id]
    decided = [(item, verdict) for item, verdict in labelled if verdict.choice is not None]
    flags = [v.consistent for v in verdicts if v.consistent is not None]
    return JudgeRunSummary(
        n_items=len(items),
        n_judged_now=n_judged_now,
        n_skipped=len(items) - n_judged_now,
        n_unparsed=sum(v.choice is None for v in verdicts),
        accuracy=sum(v.choice == item.label for item, v in decided) / len(decided) if decided else None,
        n_decided=len(decided),
        consistency=sum(flags) / len(flags) if flags else None,
        wall_s=wall_s,
        items_per_s=n_judged_now / wall_s if n_judged_now and wall_s > 0 else None,
    )


def _verdict_rows(items: Sequence[MCItem], verdicts: list[Verdict]) -> list[dict]:
    return [v.to_dict() for v in verdicts]


def judge_file(
    judge: Judge | JudgeSpec,
    items: Sequence[MCItem],
    output: str | Path,
    *,
    show_progress: bool = False,
    engine: Executor | None = None,
    overwrite: bool = False,
) -> tuple[list[Verdict], JudgeRunSummary]:
    """Judge the items whose ids are not yet in `output`, appending as batches finish.

    Args:
        judge: the configured judge, or a `JudgeSpec` to build it where the batches run.
        items: validated items (see `load_items`).
        output: verdict JSONL; finished ids in it (or in its `.partial` file) are skipped.
        show_progress: draw a progress bar (items done out of all).
        engine: the executor the batches run on (default: this process; Ray needs a `JudgeSpec`).
        overwrite: discard the verdicts an earlier run left in `output` and judge every item again.

    The judge's settings (`judge_settings`) are recorded beside `output`; resuming with other settings
    raises `jobs.resumable.SettingsChanged` instead of mixing verdicts made two ways.

    Returns:
        All verdicts for `items` (earlier runs' included), in the items' order, and a summary.
    """
    run = run_resumable(
        output,
        items,
        select_work(judge, engine),
        batch_size=judge.config.batch_size,
        engine=engine,
        finish=_verdict_rows,
        label="judging",
        show_progress=show_progress,
        settings=judge_settings(judge),
        overwrite=overwrite,
    )
    verdicts = [Verdict.from_dict(row) for row in run.rows_for(item.id for item in items)]
    return verdicts, summarize(items, verdicts, n_judged_now=run.n_todo, wall_s=run.wall_s)

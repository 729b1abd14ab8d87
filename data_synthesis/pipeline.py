"""The data engine's stages wired to folders: what `mrjudge synth <stage>` and `synth all` run.

    records/world → negatives → describe → assemble → distill
    records.jsonl   negatives.jsonl  described.jsonl  items.jsonl (+ rl/)  distilled.jsonl (+ sft/)

Each stage reads the previous stage's file from `--input` and writes its own into `--out` (the same
folder is fine and is what `synth all` does); image paths are rewritten relative to the output folder.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from data_synthesis.assemble import (
    AssembleConfig,
    assemble_items,
    build_items,
    plan_labels,
    summarize_items,
    to_description_example,
    to_sft_example,
)
from data_synthesis.prompts import DESCRIBE
from data_synthesis.sampling import (
    DEFAULT_CONCURRENCY,
    DEFAULT_REQUEST_TIMEOUT_S,
    STAGES,
    StageSampling,
    sampling_for,
)
from data_synthesis.stages import (
    WHOLE,
    Shard,
    check_failures,
    read_stage,
    run_stage,
    valid_fraction,
)
from jobs.executor import BatchFn, Executor
from jobs.jsonl import read_jsonl, write_json_atomic, write_jsonl_atomic
from judge.backends.spec import ModelSpec
from judge.prompt import PromptConfig

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's own from Python 3.11

__all__ = [
    "ModelSpec",
    "STAGE_DEFAULTS",
    "StageOptions",
    "SynthConfig",
    "engine_of",
    "load_rows",
    "run_all",
    "run_assemble",
    "run_describe",
    "run_distill",
    "run_negatives",
]

Row = dict[str, Any]

DEFAULT_MAX_FAILED_FRACTION = 0.05
"""A stage whose failed rows stay at or under this share of its input still succeeds (exit status 0)."""


def _rebase(rows: list[Row], src: Path, dst: Path) -> list[Row]:
    """Rewrite relative image paths written for `src` so they resolve from `dst`."""
    if src.resolve() == dst.resolve():
        return rows
    out = []
    for row in rows:
        image = row.get("image")
        if isinstance(image, list):
            row = {**row, "image": [_rebased_ref(ref, src, dst) for ref in image]}
        elif image is not None:
            row = {**row, "image": _rebased_ref(image, src, dst)}
        out.append(row)
    return out


def _rebased_ref(image: Any, src: Path, dst: Path) -> Any:
    if isinstance(image, str) and not image.startswith("data:") and not os.path.isabs(image):
        return os.path.relpath(src / image, dst)
    return image


def load_rows(input_dir: str | Path, stage: str, out_dir: str | Path) -> list[Row]:
    """Rows of `stage` in `input_dir` (for "records": with their world scenes when there are any)."""
    input_dir, out_dir = Path(input_dir), Path(out_dir)
    if stage == "records":
        path = input_dir / "records.jsonl"
        if not path.exists():
            raise FileNotFoundError(
                f"no records.jsonl in {input_dir}: run `mrjudge synth world` or `mrjudge synth records` first"
            )
        from data_synthesis.records import SFTRecord

        rows = [SFTRecord.from_dict(row, where=f"{path} line {n}").to_dict() for n, row in read_jsonl(path)]
        scenes = input_dir / "scenes.jsonl"
        if scenes.exists():
            worlds = {row["id"]: {"scene": row["scene"], "task": row["task"]} for _, row in read_jsonl(scenes)}
            rows = [{**row, "world": worlds[row["id"]]} if row["id"] in worlds else row for row in rows]
    else:
        rows = read_stage(input_dir, stage)
    return _rebase(rows, input_dir, out_dir)


class StageOptions(TypedDict, total=False):
    """How a per-row stage runs: the keywords `run_negatives`, `run_describe` and `run_distill` all take
    (defaults in `STAGE_DEFAULTS`)."""

    shard: Shard
    """This job's part of the rows (`--shard i/n`)."""
    batch_size: int
    """Rows per batch (model stages batch their requests by it)."""
    concurrency: int
    """Rows in flight when every model of the stage is behind HTTP (else 1)."""
    max_failed_fraction: float
    """Failed rows above this share of the input make the stage fail (`TooManyFailures`)."""
    show_progress: bool
    engine: Executor | None
    """Where batches run: this process (None) or Ray (`engine_of`)."""
    overwrite: bool
    """Start the stage's output over instead of resuming it (`--overwrite`)."""


STAGE_DEFAULTS: StageOptions = {
    "shard": WHOLE,
    "batch_size": 16,
    "concurrency": 1,
    "max_failed_fraction": DEFAULT_MAX_FAILED_FRACTION,
    "show_progress": True,
    "engine": None,
    "overwrite": False,
}


def stage_options(options: dict[str, Any]) -> StageOptions:
    """`options` over `STAGE_DEFAULTS`, checked before any work (an unknown keyword is a `TypeError`, as a
    plain signature would raise)."""
    unknown = sorted(set(options) - set(STAGE_DEFAULTS))
    if unknown:
        raise TypeError(f"unexpected keyword argument(s) {unknown}; a stage takes {list(STAGE_DEFAULTS)}")
    merged: StageOptions = {**STAGE_DEFAULTS, **options}  # type: ignore[typeddict-item]
    valid_fraction(merged["max_failed_fraction"])
    return merged


def _run_rows(
    stage: str,
    rows: list[Row],
    process: Any,
    out_dir: str | Path,
    options: StageOptions,
    *models: ModelSpec | None,
    finish: Callable[[list[Row], dict[str, Any]], None] | None = None,
    **more: Any,
) -> tuple[list[Row], dict[str, Any]]:
    """`run_stage` with the models' concurrency limit; then `finish(rows, summary)`, then a stage with too many
    failed rows is refused."""
    run = {k: v for k, v in options.items() if k != "max_failed_fraction"}
    run["concurrency"] = _concurrency(options["concurrency"], *models)
    rows, summary = run_stage(stage, rows, process, out_dir, **run, **more)
    if finish is not None:
        finish(rows, summary)
    check_failures(summary, options["max_failed_fraction"])
    return rows, summary


def run_negatives(
    input_dir: str | Path,
    out_dir: str | Path,
    *,
    generator: str = "scene",
    model: ModelSpec | None = None,
    n: int = 3,
    seed: int = 0,
    max_attempts: int = 3,
    max_new_tokens: int | None = None,
    sampling: StageSampling | dict[str, Any] | None = None,
    **run: Unpack[StageOptions],
) -> tuple[list[Row], dict[str, Any]]:
    """Negatives for every record; `sampling` is the generator's decoding (its seed defaults to `seed`).

    The settings that shape the negatives are recorded beside them: a rerun with others is refused (naming
    them) unless `overwrite`, which writes them all again."""
    from data_synthesis.negatives import ModelNegatives, SceneNegatives, negatives_tokens, summarize_negatives

    how = stage_options(run)  # before any work, not after it
    rows = load_rows(input_dir, "records", out_dir)
    overrides = _overrides("generator", sampling, max_tokens=max_new_tokens)
    params = sampling_for("generator", overrides)
    settings: dict[str, Any] = {"generator": generator, "n": n, "seed": seed}
    if generator == "scene":
        process: Any = SceneNegatives(n=n, seed=seed)
    elif generator == "model":
        if model is None:
            raise ValueError("--generator model needs --model (a folder, hub id or server URL)")
        model = _for_synthesis(model, how["concurrency"])
        gen_seed = seed if overrides.seed is None else overrides.seed
        options = dict(n=n, seed=gen_seed, max_attempts=max_attempts, params=params, image_root=out_dir)
        process = _on_model(ModelNegatives, model, **options)
        settings |= _model_settings(model, params, seed=gen_seed, max_attempts=max_attempts)
    else:
        raise ValueError(f"--generator must be 'model' or 'scene', got {generator!r}")
    used = model if generator == "model" else None
    return _run_rows(
        "negatives",
        rows,
        process,
        out_dir,
        how,
        used,
        summarize=summarize_negatives,
        tokens=negatives_tokens,
        settings=settings,
    )


def run_describe(
    input_dir: str | Path,
    out_dir: str | Path,
    *,
    describer: str = "scene",
    model: ModelSpec | None = None,
    max_new_tokens: int | None = None,
    sampling: StageSampling | dict[str, Any] | None = None,
    **run: Unpack[StageOptions],
) -> tuple[list[Row], dict[str, Any]]:
    """A description of every record's image; settings recorded and checked as `run_negatives`' are."""
    from data_synthesis.describe import ModelDescriber, SceneDescriber, described_tokens

    how = stage_options(run)  # before any work, not after it
    rows = load_rows(input_dir, "negatives", out_dir)
    params = sampling_for("describer", _overrides("describer", sampling, max_tokens=max_new_tokens))
    settings: dict[str, Any] = {"describer": describer}
    if describer == "scene":
        process: Any = SceneDescriber()
    elif describer == "model":
        if model is None:
            raise ValueError("--describer model needs --model")
        model = _for_synthesis(model, how["concurrency"])
        process = _on_model(ModelDescriber, model, params=params, image_root=out_dir)
        settings |= _model_settings(model, params)
    else:
        raise ValueError(f"--describer must be 'model' or 'scene', got {describer!r}")
    used = model if describer == "model" else None
    return _run_rows("described", rows, process, out_dir, how, used, tokens=described_tokens, settings=settings)


def run_assemble(
    input_dir: str | Path,
    out_dir: str | Path,
    config: AssembleConfig | None = None,
    *,
    engine: Executor | None = None,
    batch_size: int = 256,
) -> tuple[list[Row], dict[str, Any]]:
    """Writes items.jsonl and rl/{train,val}.jsonl; not sharded: letter balancing needs every item.

    The balancing plan (options and label position per row) is made here, over every row's id; the items
    themselves are built per row, in batches on `engine` (this process, or Ray tasks).
    """
    config = config or AssembleConfig()
    out_dir = Path(out_dir)
    rows = load_rows(input_dir, "described", out_dir)
    if engine is None or engine.name == "local":
        items, summary = assemble_items(rows, config)
    else:
        plan, skipped = plan_labels(rows, config)
        planned = [(row, p) for row, p in zip(rows, plan) if p is not None]
        batches = [planned[i : i + batch_size] for i in range(0, len(planned), batch_size)]
        built = dict(engine.map_batches(batches, BatchFn.of(partial(build_items, config=config), "assemble")))
        items = [item for index in range(len(batches)) for item in built[index]]
        summary = summarize_items(items, skipped)
    write_jsonl_atomic(out_dir / "items.jsonl", items)
    for split in ("train", "val"):
        write_jsonl_atomic(
            out_dir / "rl" / f"{split}.jsonl",
            [_rebased_item(i, out_dir, out_dir / "rl") for i in items if i["meta"]["split"] == split],
        )
    write_json_atomic(out_dir / "items.summary.json", {"stage": "assemble", **summary})
    return items, summary


def _rebased_item(item: Row, src: Path, dst: Path) -> Row:
    return _rebase([item], src, dst)[0]


def run_distill(
    input_dir: str | Path,
    out_dir: str | Path,
    *,
    reasoner: str = "scene",
    reasoner_style: str = "diff",
    reasoner_model: ModelSpec | None = None,
    rewriter: str = "rules",
    rewriter_model: ModelSpec | None = None,
    reasoner_sampling: StageSampling | dict[str, Any] | None = None,
    rewriter_sampling: StageSampling | dict[str, Any] | None = None,
    **run: Unpack[StageOptions],
) -> tuple[list[Row], dict[str, Any]]:
    """Distil judge traces for the items; when the stage is complete, write sft/{train,val}.jsonl.

    The reasoner's and rewriter's settings are recorded beside the traces; a rerun with others is refused
    unless `overwrite`."""
    from data_synthesis.distill import SceneReasoner, distilled_tokens, summarize_distilled

    how = stage_options(run)  # before any work, not after it
    out_dir = Path(out_dir)
    items = load_rows(input_dir, "items", out_dir)
    if reasoner == "scene":
        SceneReasoner(reasoner_style)  # a bad style fails here, before any batch runs
    if reasoner not in ("scene", "model") or (reasoner == "model" and reasoner_model is None):
        raise ValueError("--reasoner must be 'scene', or 'model' with --reasoner-model")
    if rewriter == "model" and (rewriter_model or reasoner_model) is None:
        raise ValueError("--rewriter model needs --rewriter-model (or --reasoner-model)")
    if rewriter not in ("rules", "model"):
        raise ValueError(f"--rewriter must be 'rules' or 'model', got {rewriter!r}")
    concurrency = how["concurrency"]
    reasoner_spec = _for_synthesis(reasoner_model, concurrency) if reasoner == "model" else None
    rewriter_spec = _for_synthesis(rewriter_model or reasoner_model, concurrency) if rewriter == "model" else None
    if rewriter_model is None and reasoner_spec is not None and rewriter_spec is not None:
        rewriter_spec = reasoner_spec  # one spec, so one loaded model, for both
    reason = (reasoner, reasoner_style, reasoner_spec, sampling_for("reasoner", reasoner_sampling))
    rewrite = (rewriter, rewriter_spec, sampling_for("rewriter", rewriter_sampling))
    settings: dict[str, Any] = {
        "reasoner": {"kind": reasoner, "style": reasoner_style}
        if reasoner == "scene"
        else {"kind": reasoner, **_model_settings(reasoner_spec, reason[3])},
        "rewriter": {"kind": rewriter, **(_model_settings(rewriter_spec, rewrite[2]) if rewriter == "model" else {})},
    }

    def finish(rows: list[Row], summary: dict[str, Any]) -> None:
        if how["shard"].count == 1:
            summary.update(write_sft_examples(items, rows, out_dir))
            write_json_atomic(out_dir / "distilled.summary.json", summary)

    return _run_rows(
        "distilled",
        items,
        _distill_work(reason, rewrite),
        out_dir,
        how,
        reasoner_spec,
        rewriter_spec,
        finish=finish,
        summarize=summarize_distilled,
        tokens=distilled_tokens,
        settings=settings,
    )


def _model_settings(spec: ModelSpec, params: Any, **more: Any) -> dict[str, Any]:
    """A model stage's settings record: the model (`ModelSpec.settings`), its decoding, and `more`."""
    return {"model": spec.settings(), "sampling": asdict(params), **more}


def _overrides(stage: str, sampling: StageSampling | dict[str, Any] | None, **fields: Any) -> StageSampling:
    """`sampling` as a `StageSampling`, with the set keyword fields (older flags such as --max-new-tokens) on top."""
    base = sampling if isinstance(sampling, StageSampling) else StageSampling.from_dict(stage, sampling)
    return replace(base, **{k: v for k, v in fields.items() if v is not None})


def _for_synthesis(spec: ModelSpec | None, concurrency: int) -> ModelSpec | None:
    """An HTTP spec with synthesis-sized client settings (long timeout, `concurrency` in flight per batch)."""
    if spec is None or spec.backend_name != "openai":
        return spec
    options = {"timeout": DEFAULT_REQUEST_TIMEOUT_S, "max_concurrency": max(concurrency, 1), **spec.options}
    return ModelSpec(spec.model, spec.backend, options)


def _concurrency(concurrency: int, *specs: ModelSpec | None) -> int:
    """Rows in flight: `concurrency` when every model of the stage is behind HTTP, else 1 (batches feed
    an in-process engine better than threads do)."""
    if concurrency < 1:
        raise ValueError(f"--concurrency must be at least 1, got {concurrency}")
    models = [spec for spec in specs if spec is not None]
    return concurrency if models and all(spec.backend_name == "openai" for spec in models) else 1


def _build_on_model(cls: Any, spec: ModelSpec, options: dict[str, Any]) -> Any:
    return cls(spec.build(), **options)


def _on_model(cls: Any, spec: ModelSpec, **options: Any) -> BatchFn:
    """A stage class over a model, built where the batches run (one backend per worker)."""
    return BatchFn.on_models(partial(_build_on_model, cls, spec, options), spec, name=cls.__name__)


def _distiller(reason: tuple, rewrite: tuple) -> Any:
    """The distillation step from its (kind, style, spec, params) parts, built where the batches run."""
    from data_synthesis.distill import Distiller, ModelReasoner, ModelRewriter, RuleRewriter, SceneReasoner

    (reasoner, style, reasoner_spec, reasoner_params), (rewriter, rewriter_spec, rewriter_params) = reason, rewrite
    reasoning = SceneReasoner(style) if reasoner == "scene" else ModelReasoner(reasoner_spec.build(), reasoner_params)
    rewriting = RuleRewriter() if rewriter == "rules" else ModelRewriter(rewriter_spec.build(), rewriter_params)
    return Distiller(reasoning, rewriting)


def _distill_work(reason: tuple, rewrite: tuple) -> BatchFn:
    build = partial(_distiller, reason, rewrite)
    if "model" not in (reason[0], rewrite[0]):
        return BatchFn(build, name="distilled")
    return BatchFn.on_models(build, reason[2], rewrite[1], name="distilled")


def write_sft_examples(
    items: list[Row],
    distilled: list[Row],
    out_dir: Path,
    prompt: PromptConfig | None = None,
    *,
    described: list[Row] | None = None,
    describe_share: float = 0.0,
    describe_instruction: str | None = None,
) -> dict[str, Any]:
    """TRL conversational judge-SFT examples from the kept traces, by split, worded with `prompt`.

    With `describe_share` > 0, that share of the training file is image → description examples made from
    the training split's `described` rows (worded with `describe_instruction`, by default the describe
    stage's own prompt), so a judge whose vision has never been trained also learns to see.
    """
    if not 0.0 <= describe_share < 1.0:
        raise ValueError(f"describe_share ({describe_share}) must be in [0, 1)")
    if describe_share and described is None:
        raise ValueError("describe_share needs the describe stage's rows (described=...)")
    by_id = {item["id"]: item for item in items}
    counts = {}
    for split in ("train", "val"):
        examples = [
            to_sft_example(_rebased_item(by_id[row["id"]], out_dir, out_dir / "sft"), row["completion"], prompt)
            for row in distilled
            if row["kept"] and by_id[row["id"]]["meta"]["split"] == split
        ]
        if split == "train" and describe_share:
            wanted = round(len(examples) * describe_share / (1.0 - describe_share))
            rows = [r for r in described if r["id"] in by_id and by_id[r["id"]]["meta"]["split"] == split]
            instruction = describe_instruction or DESCRIBE.template
            descriptions = [
                to_description_example(_rebased_item(r, out_dir, out_dir / "sft"), instruction) for r in rows[:wanted]
            ]
            examples += descriptions
            counts["sft_train_descriptions"] = len(descriptions)
        write_jsonl_atomic(out_dir / "sft" / f"{split}.jsonl", examples)
        counts[f"sft_{split}"] = len(examples)
    return counts


@dataclass
class SynthConfig:
    """The whole chain for `mrjudge synth all --config FILE` (YAML with these fields)."""

    out: str = "runs/synth"
    # Input: a source (file, folder or hub id) or, when `source` is null, the synthetic world.
    source: str | None = None
    world_n: int = 200
    world_seed: int = 0
    # How the source is read: the options of `mrjudge synth records` (data_synthesis.sources.write_records).
    split: str = "train"
    """Split of a DatasetDict or hub dataset."""
    dataset_config: str | None = None
    """Hub dataset: config (subset) name, as `load_dataset`'s `name`."""
    revision: str | None = None
    """Hub dataset: branch, tag or commit; pin it for reproducible runs."""
    limit: int | None = None
    """Read at most this many source rows."""
    fields: dict[str, str] = field(default_factory=dict)
    """Source column names (`FieldMap` fields: id, image, question, answer); unset ones take the usual spellings."""
    image_root: str | None = None
    """Folder that relative image paths are resolved against (default: the source's folder)."""
    source_name: str | None = None
    """The records' `source` and the prefix of derived ids (default: the file or dataset name)."""
    max_bad_fraction: float = 0.05
    """Bad rows are skipped (listed in records.summary.json) up to this share; above it the run stops."""
    image_workers: int | None = None
    """Threads decoding the source's images (default: one per core, at most 16)."""
    # Stages
    negatives_generator: str = "scene"
    negatives_n: int = 3
    negatives_max_attempts: int = 3
    """Model calls per record before settling for fewer negatives (`synth negatives --max-attempts`)."""
    negatives_max_new_tokens: int | None = None
    """Same as `generator_sampling.max_tokens` (kept for older configs); unset: the generator's 2048."""
    describer: str = "scene"
    describe_max_new_tokens: int | None = None
    """Same as `describer_sampling.max_tokens` (kept for older configs); unset: the describer's 2048."""
    reasoner: str = "scene"
    reasoner_style: str = "diff"
    """The scene reasoner's trace layout: one of `data_synthesis.world.REASONER_STYLES` (see `scene_reasoner`)."""
    rewriter: str = "rules"
    model: dict[str, Any] | None = None
    """ModelSpec fields for the MLLM stages (model negatives, model describer)."""
    reasoner_model: dict[str, Any] | None = None
    """ModelSpec fields for the text reasoning model (and the rewriter, unless `rewriter_model`)."""
    rewriter_model: dict[str, Any] | None = None
    assemble: dict[str, Any] = field(default_factory=dict)
    """AssembleConfig fields."""
    seed: int = 0
    batch_size: int = 16
    engine: str = "local"
    """Where the per-row stages run: "local" (this process) or "ray" (Ray Data; see `ray`)."""
    ray: dict[str, Any] = field(default_factory=dict)
    """RayConfig fields for `engine: ray` (address, workers, num_cpus_per_worker, num_gpus_per_worker)."""
    # Model stages: decoding, requests in flight, tolerated failures (data_synthesis.sampling)
    reasoner_sampling: dict[str, Any] = field(default_factory=dict)
    """temperature / top_p / max_tokens / seed for the reasoner; unset fields: 0.6 / 0.95 / 32768 / none."""
    rewriter_sampling: dict[str, Any] = field(default_factory=dict)
    """The same for the model rewriter; unset fields: 0.6 / 0.95 / 32768 / none."""
    describer_sampling: dict[str, Any] = field(default_factory=dict)
    """The same for the model describer; unset fields: 0.0 / 1.0 / 2048 / none."""
    generator_sampling: dict[str, Any] = field(default_factory=dict)
    """The same for the model negatives generator; unset fields: 0.7 / 0.8 / 2048 / `seed`."""
    concurrency: int = DEFAULT_CONCURRENCY
    """Requests in flight to an HTTP endpoint (model stages whose models are all behind HTTP)."""
    max_failed_fraction: float = DEFAULT_MAX_FAILED_FRACTION
    """A stage with more failed rows than this share of its input stops the chain (exit status 2)."""
    assemble_with_failures: bool = False
    """Assemble although negatives/describe left failed rows. Off: the chain stops before assemble, because
    letter balancing spans every row, so assembling now and again after the retry would change items."""

    def __post_init__(self) -> None:
        for stage in STAGES:
            sampling_for(stage, getattr(self, f"{stage}_sampling"))  # unknown keys or bad values fail here
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {self.concurrency}")
        if not 0.0 <= self.max_failed_fraction <= 1.0:
            raise ValueError(f"max_failed_fraction must be in [0, 1], got {self.max_failed_fraction}")
        if self.engine not in ("local", "ray"):
            raise ValueError(f"engine must be 'local' or 'ray', got {self.engine!r}")
        from jobs.executor import RayConfig

        try:
            RayConfig(**self.ray)
        except TypeError as exc:
            raise ValueError(
                f"ray: {exc} (fields: address, workers, num_cpus_per_worker, num_gpus_per_worker)"
            ) from exc
        for name in ("negatives_generator", "describer", "reasoner"):
            if getattr(self, name) not in ("scene", "model"):
                raise ValueError(f"{name} must be 'scene' or 'model', got {getattr(self, name)!r}")
        from data_synthesis.source_rows import FieldMap

        try:
            FieldMap(**self.fields)
        except TypeError as exc:
            raise ValueError(f"fields: {exc} (fields: id, image, question, answer)") from exc
        if not 0.0 <= self.max_bad_fraction <= 1.0:
            raise ValueError(f"max_bad_fraction must be in [0, 1], got {self.max_bad_fraction}")
        if self.source is not None and "scene" in (self.negatives_generator, self.describer, self.reasoner):
            raise ValueError(
                "scene generators only work on the synthetic world: set the model stages, or leave `source` null"
            )


def engine_of(config: SynthConfig) -> Executor:
    """The engine a config names (a Ray engine is built here, Ray itself starts on first use)."""
    from jobs.executor import RayConfig, make_executor

    return make_executor(config.engine, RayConfig(**config.ray) if config.engine == "ray" else None)


def _spec(fields: dict[str, Any] | None) -> ModelSpec | None:
    return None if fields is None else ModelSpec(**fields)


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
    mllm = _spec(config.model)  # one spec (so one loaded model) for negatives and descriptions
    summaries["negatives"] = run_negatives(
        out,
        out,
        generator=config.negatives_generator,
        model=mllm,
        n=config.negatives_n,
        seed=config.seed,
        max_attempts=config.negatives_max_attempts,
        max_new_tokens=config.negatives_max_new_tokens,
        sampling=config.generator_sampling,
        **common,
    )[1]
    summaries["described"] = run_describe(
        out,
        out,
        describer=config.describer,
        model=mllm,
        max_new_tokens=config.describe_max_new_tokens,
        sampling=config.describer_sampling,
        **common,
    )[1]
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
    summaries["distilled"] = run_distill(
        out,
        out,
        reasoner=config.reasoner,
        reasoner_style=config.reasoner_style,
        reasoner_model=_spec(config.reasoner_model),
        rewriter=config.rewriter,
        rewriter_model=_spec(config.rewriter_model),
        reasoner_sampling=config.reasoner_sampling,
        rewriter_sampling=config.rewriter_sampling,
        **common,
    )[1]
    write_json_atomic(out / "synth.summary.json", summaries)
    return summaries

"""`mrjudge synth`: the data engine, one subcommand per stage, plus `all`.

mrjudge synth world --n 200 --seed 0 --out runs/synth
mrjudge synth negatives --input runs/synth --out runs/synth --generator scene
mrjudge synth negatives --input data/ --out runs/neg --generator model --model Qwen/Qwen2.5-VL-7B-Instruct --shard 0/8
mrjudge synth describe --input runs/synth --out runs/synth --describer scene
mrjudge synth describe --input data/ --out runs/desc --describer model --model http://127.0.0.1:8000/v1 --max-pixels 1003520
mrjudge synth assemble --input runs/synth --out runs/synth
mrjudge synth distill --input runs/synth --out runs/synth --reasoner scene
mrjudge synth negatives --input data/ --out runs/neg --generator model --model Qwen/Qwen2.5-VL-7B-Instruct \
    --backend vllm --engine ray --ray-address auto          # one vLLM actor per GPU of the cluster
mrjudge synth distill --input runs/real --out runs/real --reasoner model --reasoner-model http://127.0.0.1:8000/v1 \
    --rewriter model --reasoner-max-tokens 16384 --concurrency 256     # a `vllm serve Qwen/QwQ-32B` endpoint
mrjudge synth all --config configs/synth_world.yaml
mrjudge synth all --world-n 50 --out runs/synth-50       # any SynthConfig field as a flag (or key=value)
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mrjudge.config_flags import ConfigFlags, add_key_values
from mrjudge.engine_flags import add_engine_flags, add_pixel_flags, engine_from, pixel_options
from mrjudge.judge_cmd import add_overwrite_flag


def _model_args(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    dash = f"--{prefix}-" if prefix else "--"
    parser.add_argument(f"{dash}model", help="model folder / hub id, or an OpenAI-compatible server URL (http://…/v1)")
    parser.add_argument(
        f"{dash}backend", choices=("hf", "openai", "vllm"), help="default: openai for URLs, hf otherwise"
    )


def _source_args(parser: argparse.ArgumentParser) -> None:
    """How an SFT source is read (`data_synthesis.sources.write_records`' options)."""
    from data_synthesis.sources import DEFAULT_MAX_BAD_FRACTION

    parser.add_argument("--split", default="train", help="split of a DatasetDict or hub dataset (default train)")
    parser.add_argument("--dataset-config", help="hub dataset: its config (subset) name, as load_dataset's `name`")
    parser.add_argument("--revision", help="hub dataset: branch, tag or commit to read (pin it for reproducible runs)")
    parser.add_argument("--limit", type=int, help="read at most this many source rows")
    for name in ("id", "image", "question", "answer"):
        parser.add_argument(f"--{name}-field", help=f"column holding the {name} (default: the usual spellings)")
    parser.add_argument(
        "--text-only",
        action="store_true",
        help="the set has no images: rows without an image column are text-only records (without this flag, a "
        "flat row with no image column is refused, so a misnamed image column cannot drop the images in silence)",
    )
    parser.add_argument("--image-root", type=Path, help="folder that relative image paths are resolved against")
    parser.add_argument(
        "--source-name", help="the records' `source` and derived-id prefix (default: file/dataset name)"
    )
    parser.add_argument(
        "--max-bad-fraction",
        type=float,
        default=DEFAULT_MAX_BAD_FRACTION,
        help="skip bad rows (listed in records.summary.json) up to this share of the rows read; above it, "
        f"write nothing and exit 2 (default {DEFAULT_MAX_BAD_FRACTION})",
    )
    parser.add_argument("--image-workers", type=int, help="threads decoding images (default: one per core, <= 16)")


def _job_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", type=Path, required=True, help="folder holding the previous stage's output")
    parser.add_argument("--out", type=Path, required=True, help="output folder (may be the same as --input)")
    parser.add_argument("--shard", help="process shard i of N, as i/N (e.g. 0/4); default: everything")
    parser.add_argument(
        "--batch-size", type=int, default=16, help="rows per batch (backend requests are batched by it)"
    )
    add_overwrite_flag(parser, "stage's rows")
    add_engine_flags(parser)
    _allow_empty_flag(parser)


def _allow_empty_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--allow-empty",
        action="store_true",
        help="exit 0 although the output is empty (no rows, negatives, items, val split or traces); "
        "without it such a stage says what is empty and exits 2",
    )


# -- model-stage decoding, concurrency and failure flags (data_synthesis.sampling) --------------------------


def _sampling_flags(parser: argparse.ArgumentParser, stage: str) -> None:
    """--<stage>-temperature / -top-p / -max-tokens / -seed; unset flags take the stage's documented default."""
    from dataclasses import asdict

    from data_synthesis.sampling import DEFAULTS, SOURCES

    group = parser.add_argument_group(f"{stage} decoding", f"defaults from: {SOURCES[stage]}")
    _stage_sampling(stage).add_to(group, shown=asdict(DEFAULTS[stage]))


def _stage_sampling(stage: str) -> ConfigFlags:
    from data_synthesis.sampling import StageSampling

    return ConfigFlags(StageSampling, prefix=stage)


def _sampling_from(args: argparse.Namespace, stage: str) -> dict:
    """The set `--<stage>-…` flags as StageSampling fields."""
    return _stage_sampling(stage).values(args)


def _throughput_flags(parser: argparse.ArgumentParser) -> None:
    from data_synthesis.pipeline import DEFAULT_MAX_FAILED_FRACTION
    from data_synthesis.sampling import DEFAULT_CONCURRENCY

    parser.add_argument(
        "--concurrency",
        type=int,
        default=DEFAULT_CONCURRENCY,
        help=f"requests in flight to an HTTP endpoint (default {DEFAULT_CONCURRENCY}: vLLM's max_num_seqs)",
    )
    parser.add_argument(
        "--max-failed-fraction",
        type=float,
        default=DEFAULT_MAX_FAILED_FRACTION,
        help="rows whose requests still fail after retries go to <stage>.failed.jsonl; above this share of "
        f"the input the stage exits 2 (default {DEFAULT_MAX_FAILED_FRACTION}); rerun to retry them",
    )


def _job_from(args: argparse.Namespace) -> dict[str, Any]:
    """The options every row stage (negatives, describe, distill) takes from `_job_args` and `_throughput_flags`."""
    from data_synthesis.stage_runner import Shard

    return {
        "shard": Shard.parse(args.shard),
        "batch_size": args.batch_size,
        "engine": engine_from(args),
        "concurrency": args.concurrency,
        "max_failed_fraction": args.max_failed_fraction,
        "overwrite": args.overwrite,
    }


def _assemble_flags() -> ConfigFlags:
    from data_synthesis.assemble import AssembleConfig

    return ConfigFlags(AssembleConfig)


def _all_flags() -> ConfigFlags:
    """`synth all`: every SynthConfig field but `engine` (its own flag, with the Ray address)."""
    from data_synthesis.pipeline import SynthConfig

    return ConfigFlags(SynthConfig, skip=("engine",))


def _spec(model: str | None, backend: str | None, options: dict | None = None):
    from data_synthesis.pipeline import ModelSpec

    return None if model is None else ModelSpec(model=model, backend=backend, options=dict(options or {}))


def _image_size_args(parser: argparse.ArgumentParser) -> None:
    """The image size the stage's MLLM sees (`synth all`: `max_pixels` under `model.options` in the YAML)."""
    add_pixel_flags(parser.add_argument_group("image size (--generator/--describer model)"), "the model")


def add_parser(commands: argparse._SubParsersAction) -> None:
    synth = commands.add_parser(
        "synth",
        help="synthesise judge training data (world, negatives, distillation, assembly)",
        description=__doc__.split("\n\n")[0],
    )
    stages = synth.add_subparsers(dest="stage", metavar="STAGE", required=True)

    p = stages.add_parser("world", help="draw the embedded synthetic world: images with known scenes + SFT records")
    p.add_argument("--n", type=int, required=True, help="number of records")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--size", type=int, default=112, help="image side in pixels (default 112)")
    p.add_argument("--shaded", action="store_true", help="draw each grid cell on its own pale background")
    p.add_argument("--out", type=Path, required=True)
    p.set_defaults(run=run_world)

    p = stages.add_parser(
        "records",
        help="normalise an SFT source (JSONL, Parquet, LLaVA JSON, TRL VLM set, HF dataset) into records.jsonl",
    )
    p.add_argument("--source", required=True, help="file, folder, or Hugging Face dataset id")
    p.add_argument("--out", type=Path, required=True)
    _source_args(p)
    p.set_defaults(run=run_records)

    p = stages.add_parser("negatives", help="write flawed-but-plausible negative answers (reverse candidate synthesis)")
    _job_args(p)
    p.add_argument(
        "--generator",
        choices=("model", "scene"),
        default="scene",
        help="model: an MLLM writes them; scene: exact, synthetic world only",
    )
    _model_args(p)
    p.add_argument("--n", type=int, default=3, help="negatives per record (default 3)")
    p.add_argument("--max-attempts", type=int, default=3, help="model calls per record before settling for fewer")
    p.add_argument("--max-new-tokens", type=int, help="same as --generator-max-tokens (kept for old scripts)")
    p.add_argument("--seed", type=int, default=0, help="scene draws; the generator's seed unless --generator-seed")
    _sampling_flags(p, "generator")
    _throughput_flags(p)
    _image_size_args(p)
    p.set_defaults(run=run_negatives)

    p = stages.add_parser("describe", help="describe each image in text (distillation step 1)")
    _job_args(p)
    p.add_argument("--describer", choices=("model", "scene"), default="scene")
    p.add_argument(
        "--describe-error-rate",
        type=float,
        default=0.0,
        help="scene describer: each fact misread with this probability, as a captioner errs (0: exact; "
        "the errors are drawn from --describer-seed, default 0)",
    )
    _model_args(p)
    p.add_argument("--max-new-tokens", type=int, help="same as --describer-max-tokens (kept for old scripts)")
    _sampling_flags(p, "describer")
    _throughput_flags(p)
    _image_size_args(p)
    p.set_defaults(run=run_describe)

    p = stages.add_parser("assemble", help="build balanced MC items and train/val splits (judge RL data)")
    p.add_argument("--input", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    _assemble_flags().add_to(p)
    add_engine_flags(p)
    _allow_empty_flag(p)
    p.set_defaults(run=run_assemble)

    p = stages.add_parser(
        "distill", help="reason with a hint, strip it, align style, keep correct traces (judge SFT data)"
    )
    _job_args(p)
    p.add_argument(
        "--reasoner",
        choices=("model", "scene", "description"),
        default="scene",
        help="scene: exact traces from the world's scene; description: the world's text reasoner, from the "
        "description only (the paper's distillation); model: a text reasoning model (--reasoner-model)",
    )
    from data_synthesis.world import HINT_USES, REASONER_STYLES

    p.add_argument(
        "--reasoner-style",
        choices=REASONER_STYLES,
        default="diff",
        help="the scene or description reasoner's trace layout (data_synthesis.world.scene_reasoner)",
    )
    p.add_argument(
        "--reasoner-hint",
        choices=HINT_USES,
        default="lean",
        help="--reasoner description, where its reading matches no option or lacks the asked object: lean on the "
        "hint (default), or ignore it (answer the closest option, or nothing; the filter drops what is not the label)",
    )
    _model_args(p, "reasoner")
    p.add_argument("--rewriter", choices=("model", "rules"), default="rules")
    _model_args(p, "rewriter")
    _sampling_flags(p, "reasoner")
    _sampling_flags(p, "rewriter")
    _throughput_flags(p)
    p.set_defaults(run=run_distill)

    p = stages.add_parser(
        "all",
        help="run the whole chain (SynthConfig: a YAML file and/or flags)",
        description="Run every stage into `out`; prints one line, and writes the stages' summaries to "
        "OUT/synth.summary.json. Field default < --config YAML < flags and key=value; nested fields (model specs, "
        "sampling, assemble, ray) are YAML or key=value only.",
    )
    p.add_argument("--config", type=Path, help="YAML with SynthConfig fields; the flags below override it")
    p.add_argument("--engine", choices=("local", "ray"), help="overrides the config's `engine`")
    p.add_argument("--ray-address", help="with --engine ray: overrides the config's `ray.address`")
    add_overwrite_flag(p, "rows of every per-row stage (negatives, describe, distill)")
    _allow_empty_flag(p)
    _all_flags().add_to(p.add_argument_group("SynthConfig fields (data_synthesis/pipeline/config.py)"))
    add_key_values(p, "world_n=50")
    p.set_defaults(run=run_all)


def _report(stage: str, summary: dict, out: Path, *, allow_empty: bool = True, **options: Any) -> int:
    """The stage's short table (the whole summary is its file), then refuse an empty output unless allowed."""
    from data_synthesis.stage_report import SUMMARY_FILES, check_not_empty, stage_table

    print("\n".join(stage_table(stage, summary, Path(out) / SUMMARY_FILES[stage])))
    check_not_empty([(stage, summary, options)], allow_empty=allow_empty)
    return 0


def _stage(stage: str, run, args: argparse.Namespace, **kwargs) -> int:
    """Run a row stage and report it; with too many failed rows, report it too and let the error go up (exit 2)."""
    from data_synthesis.stage_runner import TooManyFailures

    try:
        _, summary = run(args.input, args.out, **kwargs)
    except TooManyFailures as exc:
        _report(stage, exc.summary, args.out)
        raise
    return _report(stage, summary, args.out, allow_empty=args.allow_empty)


def run_world(args: argparse.Namespace) -> int:
    from data_synthesis.world import write_world

    write_world(args.n, args.seed, args.out, size=args.size, shaded=args.shaded)
    print(f"wrote {args.n} synthetic-world records to {args.out}")
    return 0


def run_records(args: argparse.Namespace) -> int:
    from data_synthesis.sources import FieldMap, record_options, write_records

    fields = FieldMap(
        id=args.id_field,
        image=args.image_field,
        question=args.question_field,
        answer=args.answer_field,
        text_only=args.text_only,
    )
    path, summary = write_records(
        args.source, args.out, fields=fields, image_workers=args.image_workers, **record_options(args)
    )
    skipped = len(summary["skipped"])
    note = f"; skipped {skipped} bad row(s), listed in {path.parent / 'records.summary.json'}" if skipped else ""
    print(f"wrote {summary['records']} records from {summary['rows']} rows to {path}{note}")
    if summary["text_only_records"]:
        print(f"{summary['text_only_records']} of the {summary['records']} records are text-only (no image)")
    return 0


def run_negatives(args: argparse.Namespace) -> int:
    from data_synthesis.pipeline import run_negatives as run

    options = dict(generator=args.generator, n=args.n, seed=args.seed, max_attempts=args.max_attempts)
    return _mllm_stage("negatives", run, args, "generator", **options)


def run_describe(args: argparse.Namespace) -> int:
    from data_synthesis.pipeline import run_describe as run

    seed = _sampling_from(args, "describer").get("seed") or 0
    options = dict(describer=args.describer, describe_error_rate=args.describe_error_rate, seed=seed)
    return _mllm_stage("describe", run, args, "describer", **options)


def _mllm_stage(stage: str, run, args: argparse.Namespace, role: str, **options: Any) -> int:
    """negatives or describe: the stage's own `options`, then its MLLM (`--model`, image size, `--<role>-…`
    decoding) and the job's options."""
    return _stage(
        stage,
        run,
        args,
        model=_spec(args.model, args.backend, pixel_options(args)),
        max_new_tokens=args.max_new_tokens,
        sampling=_sampling_from(args, role),
        **options,
        **_job_from(args),
    )


def run_assemble(args: argparse.Namespace) -> int:
    from data_synthesis.assemble import AssembleConfig
    from data_synthesis.pipeline import run_assemble as run

    config = AssembleConfig(**_assemble_flags().values(args))
    summary = run(args.input, args.out, config, engine=engine_from(args))[1]
    return _report("assemble", summary, args.out, allow_empty=args.allow_empty, val_fraction=config.val_fraction)


def run_distill(args: argparse.Namespace) -> int:
    from data_synthesis.pipeline import run_distill as run

    return _stage(
        "distill",
        run,
        args,
        reasoner=args.reasoner,
        reasoner_style=args.reasoner_style,
        reasoner_hint=args.reasoner_hint,
        reasoner_model=_spec(args.reasoner_model, args.reasoner_backend),
        rewriter=args.rewriter,
        rewriter_model=_spec(args.rewriter_model, args.rewriter_backend),
        reasoner_sampling=_sampling_from(args, "reasoner"),
        rewriter_sampling=_sampling_from(args, "rewriter"),
        **_job_from(args),
    )


def run_all(args: argparse.Namespace) -> int:
    from data_synthesis.pipeline import run_all as run

    config = _all_flags().config(args, args.config, {"engine": args.engine} if args.engine else None)
    if args.ray_address:
        if config.engine != "ray":
            raise ValueError("--ray-address needs --engine ray (or `engine: ray` in the config)")
        config.ray = {**config.ray, "address": args.ray_address}
    summary = run(config, overwrite=args.overwrite)
    print(all_line(summary, Path(config.out)))
    if "held_back" not in summary:
        _refuse_empty_chain(summary, config, allow_empty=args.allow_empty)
    return 0


def _refuse_empty_chain(summary: dict[str, Any], config: Any, *, allow_empty: bool) -> None:
    """`synth all` ran to the end: say which stage's output is empty (all of them at once), unless allowed."""
    from data_synthesis.assemble import AssembleConfig
    from data_synthesis.stage_report import check_not_empty

    val_fraction = AssembleConfig(**config.assemble).val_fraction
    chain = [
        ("negatives", summary["negatives"], {}),
        ("assemble", summary["items"], {"val_fraction": val_fraction}),
        ("distill", summary["distilled"], {}),
    ]
    check_not_empty(chain, allow_empty=allow_empty)


def all_line(summary: dict[str, Any], out: Path) -> str:
    """`synth all`'s one line: the counts stage by stage and where the summary file is."""
    negatives = summary["negatives"]
    steps = [f"{negatives['n_in']} records", f"{negatives['negatives']} negatives"]
    if "held_back" in summary:
        steps.append("assemble and distill wait for the failed rows (run again to retry them)")
    else:
        items, distilled = summary["items"], summary["distilled"]
        splits = ", ".join(f"{name} {n}" for name, n in items["splits"].items())
        steps.append(f"{items['items']} MC items ({splits})")
        kept = distilled["kept_fraction"]  # None when there was nothing to distill
        kept_text = "" if kept is None else f" (kept {kept:.0%})"
        steps.append(f"{distilled['sft_train'] + distilled['sft_val']} SFT traces{kept_text}")
    return f"synth all: {' → '.join(steps)}; summary: {out / 'synth.summary.json'}"

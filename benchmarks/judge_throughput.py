"""Judgments per second of one judge through transformers (batched, one at a time) and through vLLM.

All three runs judge the same items with the same settings in one invocation, so the numbers are like for
like: transformers batched (`--batch-size` items per `generate`), transformers one request at a time, and
`vllm serve` (started from the vLLM venv, see `scripts/vllm_env.sh`) reached through the OpenAI-compatible
backend with every request in flight at once, which is how synthesis and evaluation use it.

Equal work (`benchmarks.equal_work`): every call on every engine generates exactly `--max-new-tokens`
tokens (transformers `min_new_tokens`, vLLM `min_tokens` + `ignore_eos`), and the tokens each engine
generated are counted (transformers: its `generate` outputs; vLLM: its `/metrics` counter) and reported
with tokens/s. Without that a random judge stops wherever it writes EOS, and the sides do unequal work.

- CPU (default): the `tiny32` judge (randomly initialised tiny Qwen2.5-VL; vLLM's CPU attention needs heads at
  least 32 wide, so not `tiny`), float32 on both engines.
- GPU: `--shape qwen2.5-vl-7b` builds a model with Qwen2.5-VL-7B's config (random weights: transformers
  initialises them on the GPU, vLLM uses `--load-format dummy`), bfloat16, with the real image processor's
  pixel range; `--image-size` sets the picture side. Run it where a CUDA build of vLLM is installed
  (`--vllm VENV_OR_COMMAND`, default: the vLLM venv of this checkout, else `vllm` on PATH).

    python -m benchmarks.judge_throughput [--items 32] [--max-new-tokens 64] [--size tiny32]
    python -m benchmarks.judge_throughput --shape qwen2.5-vl-7b --items 256 --image-size 448 --batch-size 32

Each engine is timed `--repeats` times (5; the two transformers sides taking turns) and the figures are the
runs' medians by tokens/s, as pyperf reports a short benchmark: one batched run lasts well under a second on
the tiny judge, and three single runs of it read 5.4×, 5.1× and 6.5× for the batched speedup.

Run time: 90–98 s bare on 2 quiet cores with the vLLM venv built (three runs, 2026-12-06).
Prints one JSON line with `hf_batched_items_per_s`, `hf_single_items_per_s` and `vllm_items_per_s`
(null, with `vllm_error`, when vLLM cannot run here), each side's `*_tokens` and `*_tokens_per_s`,
`expected_tokens` (items x orders x max_new_tokens), `tokens_equal` (every run of every side generated exactly
that), `repeats`, every run's `*_tokens_per_s_runs`, the pairs' `batched_speedup_runs` and their
`batched_speedup_spread` ((max − min) / median).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import operator
import os
import platform
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from PIL import Image

from benchmarks.equal_work import FORCED_LENGTH, GenerateCounter, vllm_extra_body, vllm_generation_tokens
from benchmarks.kit import add_repeats_flag, emit, median_run, spread
from judge.backends.hf import TransformersBackend
from judge.judging import Judge, JudgeConfig
from judge.models import LoadedModel, load_model, load_processor
from judge.types import MCItem
from tiny_world.model import build_tiny_model, qwen_text_shape

# Qwen2.5-VL-7B-Instruct's config.json (text and vision towers), for `--shape qwen2.5-vl-7b`.
QWEN2_5_VL_7B = dict(
    text=dict(
        **qwen_text_shape(
            hidden=3584, layers=28, heads=28, kv_heads=4, intermediate=18944, vocab=152064, max_positions=128000
        ),
        rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0, "mrope_section": [16, 24, 24]},
    ),
    vision=dict(
        depth=32,
        hidden_size=1280,
        intermediate_size=3420,
        num_heads=16,
        out_hidden_size=3584,
        patch_size=14,
        spatial_merge_size=2,
        temporal_patch_size=2,
        window_size=112,
        fullatt_block_indexes=[7, 15, 23, 31],
    ),
    min_pixels=56 * 56,
    max_pixels=28 * 28 * 1280,
)


def make_items(n: int, seed: int, image_size: int = 84) -> list[MCItem]:
    rng = random.Random(seed)
    return [
        MCItem(
            id=i,
            question="What colour is the shape?",
            candidates=[f"The shape is {c}." for c in rng.sample(["red", "green", "blue", "yellow"], 2)],
            image=Image.new("RGB", (image_size, image_size), tuple(rng.randrange(256) for _ in range(3))),
            label=0,
        )
        for i in range(n)
    ]


@dataclasses.dataclass
class Rate:
    """One engine's timed run: items and generated tokens over the same wall time."""

    items: int
    tokens: int
    seconds: float

    @property
    def items_per_s(self) -> float:
        return self.items / self.seconds

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds


def timed_select(judge: Judge, items: list[MCItem], tokens: Any, *, warm_up: bool = True) -> Rate:
    """Time `judge.select(items)` (after a warm-up on two items: first-call allocations, lazy vocab scans,
    kernel selection); `tokens()` reads the engine's token count."""
    if warm_up:
        judge.select(items[:2])
    before = tokens()
    start = time.perf_counter()
    judge.select(items)
    seconds = time.perf_counter() - start
    return Rate(len(items), int(tokens() - before), seconds)


def hf_rates(
    loaded: LoadedModel, items: list[MCItem], config: dict, batch_size: int, repeats: int
) -> tuple[list[Rate], list[Rate]]:
    """Transformers at the forced length, `batch_size` items per call against one at a time, each timed
    `repeats` times, taking turns (a slow spell of the machine hits both sides)."""
    judges = [
        Judge(TransformersBackend(loaded, max_batch_size=2 * size), JudgeConfig(batch_size=size, **config))
        for size in (batch_size, 1)
    ]
    batched, single = [], []
    with GenerateCounter(loaded.model, config["max_new_tokens"]) as counter:
        for i in range(repeats):
            for judge, runs in zip(judges, (batched, single)):
                runs.append(timed_select(judge, items, lambda: counter.tokens, warm_up=i == 0))
    return batched, single


def _write_7b_folder(folder: Path, layers: int | None, seed: int) -> Path:
    """A folder with Qwen2.5-VL-7B's config, the tiny tokenizer, the real pixel range and no weights."""
    from transformers import Qwen2_5_VLConfig

    from judge.backends.hf_compat import write_stock_processor_config

    build_tiny_model(folder, size="tiny32", seed=seed)  # tokenizer, chat template, processor files
    (folder / "model.safetensors").unlink()
    tokenizer_ids = json.loads((folder / "config.json").read_text())
    text = dict(QWEN2_5_VL_7B["text"], num_hidden_layers=layers or QWEN2_5_VL_7B["text"]["num_hidden_layers"])
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        text[key] = tokenizer_ids["text_config"][key]
    vision = dict(QWEN2_5_VL_7B["vision"])
    if layers:
        vision["depth"] = layers
        vision["fullatt_block_indexes"] = [layers - 1]
    config = Qwen2_5_VLConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=tokenizer_ids["image_token_id"],
        video_token_id=tokenizer_ids["video_token_id"],
        vision_start_token_id=tokenizer_ids["vision_start_token_id"],
        vision_end_token_id=tokenizer_ids["vision_end_token_id"],
        tie_word_embeddings=False,
    )
    config.architectures = ["Qwen2_5_VLForConditionalGeneration"]  # without it vLLM picks its pooling runner
    config.save_pretrained(folder)
    processor_path = folder / "processor_config.json"
    processor = json.loads(processor_path.read_text())
    processor["image_processor"]["size"] = {
        "shortest_edge": QWEN2_5_VL_7B["min_pixels"],
        "longest_edge": QWEN2_5_VL_7B["max_pixels"],
    }
    processor_path.write_text(json.dumps(processor, indent=2))
    write_stock_processor_config(folder)
    return folder


def _load_7b(folder: Path, device: str, dtype: torch.dtype) -> LoadedModel:
    from transformers import AutoConfig, AutoModelForImageTextToText

    config = AutoConfig.from_pretrained(folder)
    with torch.device(device):
        model = AutoModelForImageTextToText.from_config(config, dtype=dtype)
    model.generation_config.pad_token_id = config.text_config.pad_token_id
    model.generation_config.eos_token_id = config.text_config.eos_token_id
    return LoadedModel(model=model.eval(), processor=load_processor(str(folder), is_vlm=True), is_vlm=True)


def _vllm_command(spec: str | None) -> list[str]:
    """`vllm` from `--vllm` (a venv or a command), else the checkout's vLLM venv, else `vllm` on PATH."""
    from judge.backends.vllm_local import VLLMUnavailable, vllm_venv

    if spec:
        path = Path(spec)
        return [str(path / "bin" / "vllm")] if (path / "bin" / "vllm").exists() else [spec]
    try:
        return [str(vllm_venv() / "bin" / "vllm")]
    except VLLMUnavailable:
        found = shutil.which("vllm")
        if found:
            return [found]
        raise


def vllm_rates(folder: Path, items: list[MCItem], config: dict, args, log: Path) -> list[Rate]:
    from judge.backends.openai_http import OpenAIBackend
    from judge.backends.vllm_local import serve

    command = _vllm_command(args.vllm)
    venv = Path(command[0]).parent.parent
    max_len = json.loads((folder / "config.json").read_text())["text_config"]["max_position_embeddings"]
    serve_args = ["--runner", "generate", "--max-model-len", str(min(8192, max_len)), "--seed", str(args.seed)]
    if args.shape:
        serve_args += ["--dtype", "bfloat16", "--load-format", "dummy", "--gpu-memory-utilization", "0.85"]
    else:
        serve_args += ["--dtype", "float32"]
    with serve(folder, venv=venv, served_name="judge", args=serve_args, log_path=log, startup_timeout=900) as url:
        extra = vllm_extra_body(config["max_new_tokens"])
        backend = OpenAIBackend(url, max_concurrency=2 * len(items), timeout=600, extra_body=extra)
        judge = Judge(backend, JudgeConfig(batch_size=len(items), **config))
        return [
            timed_select(judge, items, lambda: vllm_generation_tokens(url), warm_up=i == 0) for i in range(args.repeats)
        ]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.judge_throughput", description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=8, help="items per batch in the batched transformers run")
    parser.add_argument("--size", default="tiny32", help="tiny model size (CPU); vLLM needs tiny32, small or medium")
    parser.add_argument("--shape", choices=("qwen2.5-vl-7b",), help="a full-size model from config (GPU)")
    parser.add_argument("--layers", type=int, help="with --shape: fewer layers (a quick check of the path)")
    parser.add_argument("--image-size", type=int, default=84, help="picture side in pixels")
    parser.add_argument("--device", help="transformers device (default: cuda with --shape, else cpu)")
    parser.add_argument("--vllm", help="vLLM venv folder or `vllm` command (default: this checkout's vLLM venv)")
    parser.add_argument("--no-vllm", action="store_true", help="transformers columns only")
    parser.add_argument("--seed", type=int, default=0)
    add_repeats_flag(parser, 5, "timed runs of each engine; medians are the figures")
    args = parser.parse_args()

    device = args.device or ("cuda" if args.shape else "cpu")
    torch.manual_seed(args.seed)
    items = make_items(args.items, args.seed, args.image_size)
    config = dict(orders=2, max_new_tokens=args.max_new_tokens, seed=args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "model"
        if args.shape:
            _write_7b_folder(folder, args.layers, args.seed)
            loaded = _load_7b(folder, device, torch.bfloat16)
            model_name = f"{args.shape} shape{f', {args.layers} layers' if args.layers else ''} (random init, bf16)"
        else:
            build_tiny_model(folder, size=args.size, seed=args.seed)
            from judge.backends.hf_compat import write_stock_processor_config

            write_stock_processor_config(folder)  # vLLM loads the stock Qwen2.5-VL processor
            loaded = load_model(str(folder), device=device)
            model_name = f"{args.size} Qwen2.5-VL (random init, float32)"
        batched_runs, single_runs = hf_rates(loaded, items, config, args.batch_size, args.repeats)
        del loaded
        gc.collect()
        if device.startswith("cuda"):
            torch.cuda.empty_cache()

        vllm_runs, vllm_error = [], None
        if not args.no_vllm:
            try:
                vllm_runs = vllm_rates(folder, items, config, args, Path(tmp) / "vllm.log")
            except Exception as exc:  # noqa: BLE001 - reported in the JSON line, the HF columns still stand
                vllm_error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                print(f"vLLM run failed:\n{exc}", file=sys.stderr)

    expected = args.items * config["orders"] * args.max_new_tokens
    per_s = operator.attrgetter("tokens_per_s")  # the runs' figure the medians are taken on
    hf_batched, hf_single = median_run(batched_runs, per_s), median_run(single_runs, per_s)
    vllm = median_run(vllm_runs, per_s) if vllm_runs else None
    speedups = [b.tokens_per_s / s.tokens_per_s for b, s in zip(batched_runs, single_runs)]
    row = {
        "benchmark": "judge_throughput",
        "model": model_name,
        "device": device,
        "threads": torch.get_num_threads(),
        "machine": platform.machine(),
        "items": args.items,
        "orders": config["orders"],
        "max_new_tokens": args.max_new_tokens,
        "image_size": args.image_size,
        "batch_items": args.batch_size,
        "equal_work": FORCED_LENGTH,
        "expected_tokens": expected,
        "hf_batched_items_per_s": hf_batched.items_per_s,
        "hf_single_items_per_s": hf_single.items_per_s,
        "vllm_items_per_s": None if vllm is None else vllm.items_per_s,
        "hf_batched_tokens": hf_batched.tokens,
        "hf_single_tokens": hf_single.tokens,
        "vllm_tokens": None if vllm is None else vllm.tokens,
        "hf_batched_tokens_per_s": hf_batched.tokens_per_s,
        "hf_single_tokens_per_s": hf_single.tokens_per_s,
        "vllm_tokens_per_s": None if vllm is None else vllm.tokens_per_s,
        "tokens_equal": all(r.tokens == expected for r in batched_runs + single_runs + vllm_runs),
        "batched_speedup": hf_batched.tokens_per_s / hf_single.tokens_per_s,
        "vllm_speedup_over_hf_batched": None if vllm is None else vllm.tokens_per_s / hf_batched.tokens_per_s,
        "repeats": args.repeats,
        "hf_batched_tokens_per_s_runs": [r.tokens_per_s for r in batched_runs],
        "hf_single_tokens_per_s_runs": [r.tokens_per_s for r in single_runs],
        "vllm_tokens_per_s_runs": [r.tokens_per_s for r in vllm_runs] or None,
        "batched_speedup_runs": speedups,
        "batched_speedup_spread": spread(speedups),
    }
    if device == "cpu" and vllm is not None:
        row["vllm_cpu_threads"] = "1 (vLLM's CPU engine binds one core and leaves one for its API server)"
    if vllm_error:
        row["vllm_error"] = vllm_error
    if os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
        row["vllm_cpu_kvcache_gib"] = os.environ["VLLM_CPU_KVCACHE_SPACE"]
    emit(row, digits=3)


if __name__ == "__main__":
    main()

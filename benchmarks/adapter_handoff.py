"""Hand-off from training to serving: the LoRA adapter alone vs merged full weights — bytes moved, wall time.

A hand-off starts when the training side exports its new weights and ends when the serving side has
answered a request with them. Two ways, timed end to end in one process, on the same model and adapter:

A. Adapter only (what the adapter store is for): `AdapterStore.save` writes the revision (PEFT's
   `adapter_model.safetensors` + `adapter_config.json` + `revision.json`, fsynced, renamed into place);
   the serving side resolves `policy@latest` and loads it through an `AdapterPool` over a
   `TransformersBackend` (the reward server's own path: base check, LRU eviction, `load_adapter` under
   the revision's unique name) and answers a `ChatRequest` naming it. Bytes moved: the revision folder's files.
B. Merged full weights, done the best reasonable way: the training side computes W + s·B·A for every
   LoRA target out of place with one bf16 `addmm` per layer (fp32 accumulation, one rounding; the fp32
   factors are rounded to bf16 first — an exact fp32 merge gives the same weights up to one bf16 ulp on
   a few % of them and costs ~10x more CPU time), writes the whole base state dict in bf16 with
   `safetensors.torch.save_file` and fsyncs it, as the store does its files; the serving
   side reads it with `load_file` into its resident model in place (`load_state_dict(strict=True)`, no
   re-instantiation) and answers the same request (no adapter). Bytes moved: the safetensors file.
   PEFT's in-place `merge_adapter()` / `unmerge_adapter()` is not used: on a bf16 base, W + ΔW - ΔW is
   not W after rounding, so every export would leave the training base drifted (`merge_drift_max_abs`
   reports by how much, measured once, untimed, on a throwaway copy of one layer).

Timed phases per hand-off: `export` (training side writes; for B also split into merge / write / fsync),
`load` (serving side takes the weights in), `answer` (one `generate` call of `--answer-tokens` greedy
tokens through the backend); `time_ratio_export_load` leaves the answer out. Both serving copies hold the
same base, resident, and are warmed up before timing. The adapter side keeps one revision resident, as a
GRPO hand-off does: each new revision evicts the last, whose PEFT slot it then takes in place (a tensor
copy); the one-time injection of PEFT's LoRA layers happens in an untimed first hand-off, reported as
`adapter_first_handoff_s`. (On CPU, torch 2.13's bf16 `linear` is ~60x slower for a weight that does not
require grad, and PEFT freezes the base it wraps; the transformers backend turns the flag back on, which
under inference mode changes nothing else, so both sides answer at the same speed.) The hand-offs
alternate (A then B, then B then A, …) and each repeat follows one more AdamW step on the adapter, so
every revision is new (a fresh content hash, a fresh name to load). Files are read back from the page
cache right after being written (nothing can drop caches here); a real hand-off between machines adds
the network on top, in proportion to the bytes.

The measured model is a text-only Qwen2 causal LM built from a `Qwen2Config` with seeded random bf16
weights (≥ 1.0e9 parameters, untied embeddings; nothing downloaded) on the CPU; the training side is
the PEFT LoRA (rank `--rank`, q/k/v/o/gate/up/down projections) after real AdamW steps on random tokens;
the prompt is tokenised by mr-judge's locally trained tiny Qwen tokenizer (its ids are valid in any
larger vocabulary). `answers_match`: after each hand-off the logits of the request's prompt on both
serving sides are compared with the training side's own (adapter active): the adapter side's logits and
answer equal the trainer's exactly, and each serving side is closer to the trained model than the bare
base is (the adapter's effect is visible and both paths carry it). The merged side rounds W + s·B·A to
bf16, so its greedy token can differ on a near tie (`full_answer_equal` per check).

The 7B figures are computed, not assumed: a Qwen2.5-7B-shaped text model (hidden 3584, 28 layers,
intermediate 18944, 28 / 4 heads, vocab 152064, untied embeddings — the text side of Qwen2.5-VL-7B) is
built on the meta device and wrapped with the same LoRA at rank 8 and 64; `bytes_ratio_7b_r*` = base
parameters × 2 bytes / LoRA parameters × 2 bytes (both bf16). The VL model's vision tower (~0.7B more
parameters, not adapted) would make the full-weights side, and so the ratio, larger still. Note that
the store writes the adapter in the dtype it was trained in — float32 under PEFT's default
(`adapter_dtype`), twice the bf16 bytes — so the measured bytes ratio is about half the bf16 one.

    python -m benchmarks.adapter_handoff                  # the >= 1B model (minutes; ~11 GB peak RAM)
    OMP_NUM_THREADS=1 python -m benchmarks.adapter_handoff --small --repeats 2   # plumbing check, seconds
    python -m benchmarks.adapter_handoff --shape 4b --device cuda   # on a GPU (benchmarks.gpu_checks runs it)

Run time: the bare run (three >= 1B bf16 models, 3 hand-offs of each kind) took 102 s on 2 cores (2026-12-03,
~11 GB peak RAM; hand-off 1.45 s against 12.9 s there, the full side's write 7.3 s of it); `--small --repeats 2`
took 25 s under load (7 agents on 2 cores).

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from adapter_revisions.catalogue import fsync_path
from adapter_revisions.fingerprint import base_fingerprint
from adapter_revisions.pool import AdapterPool
from adapter_revisions.store import AdapterStore
from benchmarks.kit import add_repeats_flag, emit, peak_rss_mib, rounded
from benchmarks.lora_model import SHAPES, build_base, count_7b, lora_config, merge_drift, merged_state_dict, train_step
from judge.backends.base import ChatRequest, SamplingParams
from judge.backends.hf import TransformersBackend
from judge.models import LoadedModel
from tiny_world.model import build_tokenizer

POLICY = "handoff"
PROMPT = "Question: What colour is the circle?\nA. red\nB. blue\nAnswer with the letter of the best option."
MAX_ADAPTERS = 1  # one resident revision, as in a GRPO hand-off: each new one replaces the last
DIGITS = 5  # the record's decimals: the logit differences (answer_checks) are small


def sync() -> None:
    """Wait for queued GPU work, so each phase's time is its own (CUDA runs asynchronously); no-op on CPU."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def handoff_adapter(
    store: AdapterStore,
    pool: AdapterPool,
    trainer: Any,
    fingerprint: str,
    request: ChatRequest,
    sampling: SamplingParams,
    *,
    step: int,
    parent: str | None,
) -> tuple[dict[str, float], int, str, str]:
    """Hand-off A: store revision → the serving pool resolves `latest` and loads it → the backend answers with it.

    Returns the phase timings, the revision's bytes, the answer text and the revision's ref.
    """
    sync()
    t0 = time.perf_counter()
    revision = store.save(POLICY, trainer, base_fingerprint=fingerprint, step=step, parent=parent)
    t1 = time.perf_counter()
    name = pool.ensure_loaded(pool.resolve(f"{POLICY}@latest"))
    sync()
    t2 = time.perf_counter()
    answer = pool.backend.generate([dataclasses.replace(request, adapter=name)], sampling)[0].text
    t3 = time.perf_counter()
    timing = {"export": t1 - t0, "load": t2 - t1, "answer": t3 - t2, "total": t3 - t0}
    return timing, folder_bytes(revision.path), answer, revision.ref


def handoff_full(
    trainer: Any, serving: Any, backend: TransformersBackend, request: ChatRequest, sampling: SamplingParams, path: Path
) -> tuple[dict[str, float], int, str]:
    """Hand-off B: merged bf16 state dict → one safetensors file (fsynced) → loaded in place → the backend answers.

    Returns the phase timings, the file's bytes and the answer text.
    """
    from safetensors.torch import load_file, save_file

    sync()
    t0 = time.perf_counter()
    state = merged_state_dict(trainer)
    sync()
    merged = time.perf_counter()
    save_file(state, str(path), metadata={"format": "pt"})
    del state
    written = time.perf_counter()
    fsync_path(path)
    fsync_path(path.parent)
    t1 = time.perf_counter()
    loaded = load_file(str(path))
    serving.load_state_dict(loaded, strict=True)
    del loaded
    sync()
    t2 = time.perf_counter()
    answer = backend.generate([request], sampling)[0].text
    t3 = time.perf_counter()
    timing = {"export": t1 - t0, "load": t2 - t1, "answer": t3 - t2, "total": t3 - t0}
    timing.update({"export_merge": merged - t0, "export_write": written - merged, "export_fsync": t1 - written})
    return timing, path.stat().st_size, answer


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.iterdir() if p.is_file())


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.adapter_handoff", description=__doc__.split("\n")[0])
    add_repeats_flag(parser, 3, "hand-offs of each kind (medians are reported)")
    parser.add_argument("--rank", type=int, default=8, help="LoRA rank of the measured adapter")
    parser.add_argument("--answer-tokens", type=int, default=1, help="greedy tokens the serving side generates")
    parser.add_argument("--train-tokens", type=int, default=16, help="random tokens per AdamW step")
    parser.add_argument("--lr", type=float, default=1e-2, help="AdamW learning rate (large enough to be visible)")
    parser.add_argument("--small", action="store_true", help="a tiny model for development (no >= 1B check)")
    parser.add_argument("--shape", choices=sorted(set(SHAPES) - {"7b"}), help="model shape (default: 1b; small)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:i]: where all three models live")
    parser.add_argument("--workdir", type=Path, default=None, help="scratch folder (default: a temp dir, removed)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.small and args.shape not in (None, "small"):
        parser.error(f"--small contradicts --shape {args.shape}")
    args.shape = "small" if args.small else (args.shape or "1b")
    return args


@dataclasses.dataclass
class Sides:
    """The set-up both hand-offs run on: the trainer, and two serving copies of its base (one takes adapter
    revisions from the store, the other merged full weights), with the request they answer."""

    trainer: Any
    optimizer: Any
    fingerprint: str
    store: AdapterStore
    pool: AdapterPool
    adapter_side: TransformersBackend
    full_side: TransformersBackend
    trainer_side: TransformersBackend
    request: ChatRequest
    sampling: SamplingParams
    prompt_ids: Any
    params: int
    vocab: int
    adapter_dtype: str

    def logits(self, model: Any) -> Any:
        with torch.inference_mode():
            return model(input_ids=self.prompt_ids).logits[0].float()


def set_up(args: argparse.Namespace, workdir: Path) -> Sides:
    """One base, three resident copies (untimed); the serving sides warmed up."""
    from peft import get_peft_model

    base = build_base(args.shape, args.seed, args.device)
    params = sum(p.numel() for p in base.parameters())
    if args.shape != "small" and params < 1_000_000_000:
        raise SystemExit(f"the measured model has {params:,} parameters; the benchmark needs at least 1e9")
    serving_adapter = copy.deepcopy(base)
    serving_full = copy.deepcopy(base)
    fingerprint = base_fingerprint(base)
    if base_fingerprint(serving_adapter) != fingerprint:
        raise RuntimeError("the serving copy's fingerprint differs from the training base's")
    vocab = base.config.vocab_size
    trainer = get_peft_model(base, lora_config(args.rank))
    adapter_dtype = str(next(p for n, p in trainer.named_parameters() if ".lora_" in n).dtype).split(".")[-1]
    optimizer = torch.optim.AdamW([p for p in trainer.parameters() if p.requires_grad], lr=args.lr)

    tokenizer = build_tokenizer()
    store = AdapterStore(workdir / "store")
    adapter_side = TransformersBackend(LoadedModel(serving_adapter, tokenizer, is_vlm=False), max_batch_size=1)
    pool = AdapterPool(adapter_side, store, base_fingerprint=base_fingerprint(serving_adapter), capacity=MAX_ADAPTERS)
    full_side = TransformersBackend(LoadedModel(serving_full, tokenizer, is_vlm=False), max_batch_size=1)
    trainer_side = TransformersBackend(LoadedModel(trainer, tokenizer, is_vlm=False), max_batch_size=1)
    request = ChatRequest.user(PROMPT)
    sampling = SamplingParams(max_new_tokens=args.answer_tokens, temperature=0.0)
    text = tokenizer.apply_chat_template(request.messages, tokenize=False, add_generation_prompt=True)
    prompt_ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"].to(args.device)
    for backend in (adapter_side, full_side):  # warm-up: thread pools, kernels
        backend.generate([request], sampling)
    return Sides(
        trainer, optimizer, fingerprint, store, pool, adapter_side, full_side, trainer_side,
        request, sampling, prompt_ids, params, vocab, adapter_dtype,
    )  # fmt: skip


def hand_off(
    sides: Sides, kind: str, step: int, parent: str | None, workdir: Path
) -> tuple[dict, int, str, str | None]:
    """One timed hand-off of the trainer's weights after training step `step`, as an adapter revision or as
    merged full weights: its phase timings, the bytes that moved, the served answer, and the adapter's store
    reference (the parent of the next revision)."""
    if kind == "adapter":
        return handoff_adapter(
            sides.store, sides.pool, sides.trainer, sides.fingerprint, sides.request, sides.sampling,
            step=step, parent=parent,
        )  # fmt: skip
    path = workdir / f"full-{step}.safetensors"
    timing, size, answer = handoff_full(
        sides.trainer, sides.full_side.loaded.model, sides.full_side, sides.request, sides.sampling, path
    )
    path.unlink()
    return timing, size, answer, parent


def check_answers(sides: Sides, answers: dict[str, str], revision: str | None) -> dict[str, Any]:
    """Untimed: do both serving sides answer like the trained model?

    The adapter path must answer exactly as the trainer; the merged path carries the adapter (closer to the
    trainer than the bare base) but rounds W + s·B·A to bf16, which can flip a near-tied greedy token of this
    random model: reported, not required."""
    trainer = sides.trainer
    answers["trainer"] = sides.trainer_side.generate(
        [dataclasses.replace(sides.request, adapter="default")], sides.sampling
    )[0].text
    trained = sides.logits(trainer)
    with trainer.disable_adapter():
        bare = sides.logits(trainer)
    with sides.adapter_side.using_adapter(revision):
        served = {
            "adapter": sides.logits(sides.adapter_side.loaded.model),
            "full": sides.logits(sides.full_side.loaded.model),
        }
    effect = float((bare - trained).abs().mean())
    check: dict[str, Any] = {"adapter_effect_mean_abs": effect}
    ok = answers["adapter"] == answers["trainer"]
    for kind, got in served.items():
        diff = float((got - trained).abs().mean())
        check[f"{kind}_vs_trainer_mean_abs"] = diff
        check[f"{kind}_vs_trainer_max_abs"] = float((got - trained).abs().max())
        ok = ok and diff < effect
    ok = ok and int(served["adapter"][-1].argmax()) == int(trained[-1].argmax())
    check["full_answer_equal"] = answers["full"] == answers["trainer"]
    check["ok"] = ok
    return check


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """The whole measurement (set-up, hand-offs, checks) on `args.device`; returns the JSON record (rounded)."""
    began = time.perf_counter()
    load_avg = os.getloadavg()[0]  # other work on the machine inflates every figure alike
    if args.threads:
        torch.set_num_threads(args.threads)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="adapter_handoff."))
    owned = args.workdir is None
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        sides = set_up(args, workdir)
        # The serving side's first adapter injects PEFT's LoRA layers (once per resident slot); every later
        # revision is copied into a freed slot in place. Warm that up like the kernels, and report it.
        cold = time.perf_counter()
        parent = hand_off(sides, "adapter", 0, None, workdir)[3]
        cold_s = time.perf_counter() - cold
        train_losses = [train_step(sides.trainer, sides.optimizer, args.train_tokens, sides.vocab, args.seed + 1)]
        drift = merge_drift(sides.trainer)
        setup_s = time.perf_counter() - began

        runs: dict[str, list[dict[str, float]]] = {"adapter": [], "full": []}
        sizes: dict[str, list[int]] = {"adapter": [], "full": []}
        checks: list[dict[str, Any]] = []
        for repeat in range(args.repeats):
            if repeat:
                step_seed = args.seed + 1 + repeat
                train_losses.append(
                    train_step(sides.trainer, sides.optimizer, args.train_tokens, sides.vocab, step_seed)
                )
            answers: dict[str, str] = {}
            for kind in ("adapter", "full") if repeat % 2 == 0 else ("full", "adapter"):  # order turned each time
                timing, size, answers[kind], parent = hand_off(sides, kind, repeat + 1, parent, workdir)
                runs[kind].append(timing)
                sizes[kind].append(size)
            checks.append(check_answers(sides, answers, parent))
        record = figures(args, sides, runs, sizes, cold_s)
        record.update(
            answers_match=all(c["ok"] for c in checks),
            answer_checks=checks,
            merge_drift_max_abs=drift,
            train_losses=train_losses,
            threads=torch.get_num_threads(),
            load_avg_1m_at_start=load_avg,
            peak_rss_gib=peak_rss_mib() / 1024,
            peak_gpu_gib=torch.cuda.max_memory_allocated() / 2**30 if "cuda" in args.device else None,
            setup_s=setup_s,
            wall_s=time.perf_counter() - began,
        )
    finally:
        if owned:
            shutil.rmtree(workdir, ignore_errors=True)
    return rounded(record, DIGITS)


def figures(
    args: argparse.Namespace,
    sides: Sides,
    runs: dict[str, list[dict[str, float]]],
    sizes: dict[str, list[int]],
    cold_s: float,
) -> dict[str, Any]:
    """The record's measured figures (medians over the repeats) and the 7B counts, in the JSON line's order."""

    def median(kind: str, phase: str) -> float:
        return statistics.median(run[phase] for run in runs[kind])

    adapter_s, full_s = median("adapter", "total"), median("full", "total")
    adapter_bytes, full_bytes = int(statistics.median(sizes["adapter"])), int(statistics.median(sizes["full"]))
    r8, r64 = count_7b(8), count_7b(64)
    return {
        "benchmark": "adapter_handoff",
        "model_shape": args.shape,
        "device": args.device,
        "params_measured": sides.params,
        "rank": args.rank,
        "adapter_dtype": sides.adapter_dtype,
        "repeats": args.repeats,
        "answer_tokens": args.answer_tokens,
        "adapter_bytes": adapter_bytes,
        "full_bytes": full_bytes,
        "bytes_ratio_measured": full_bytes / adapter_bytes,
        "adapter_handoff_s": adapter_s,
        "full_handoff_s": full_s,
        "time_ratio_measured": full_s / adapter_s,
        "adapter_phases_s": {p: median("adapter", p) for p in ("export", "load", "answer")},
        "full_phases_s": {
            p: median("full", p) for p in ("export", "load", "answer", "export_merge", "export_write", "export_fsync")
        },
        "time_ratio_export_load": (median("full", "export") + median("full", "load"))
        / (median("adapter", "export") + median("adapter", "load")),
        "adapter_handoff_runs_s": [r["total"] for r in runs["adapter"]],
        "adapter_first_handoff_s": cold_s,
        "full_handoff_runs_s": [r["total"] for r in runs["full"]],
        "params_7b": r8["base_params"],
        "lora_params_7b_r8": r8["lora_params"],
        "lora_params_7b_r64": r64["lora_params"],
        "bytes_ratio_7b_r8": r8["base_params"] / r8["lora_params"],
        "bytes_ratio_7b_r64": r64["base_params"] / r64["lora_params"],
    }


def main(argv: list[str] | None = None) -> int:
    emit(measure(parse_args(argv)), digits=DIGITS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

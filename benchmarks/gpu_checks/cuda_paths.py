"""Part 1, `cuda_paths`: judge SFT, judge GRPO, `mrjudge judge` and the judge's throughput on the device.

A tiny Qwen2.5-VL and a 20-item synthetic world are built here; each run on the device is checked to be of the
same kind (`kinds`) as the same run on the CPU. Every check fails soft: its error is a finding in the record,
and the next check runs.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.gpu_checks.children import child_command, child_env
from benchmarks.gpu_checks.kinds import same_kind, verdict_problems
from benchmarks.gpu_checks.record import Record
from benchmarks.kit import ROOT

Check = tuple[dict[str, Any], bool]
"""A check's findings and whether it passed."""


def train(kind: str, model_dir: Path, data: Path, out: Path, device: str, steps: int) -> dict[str, Any]:
    """`steps` of judge SFT or GRPO through the recipe (`training.sft` / `training.grpo`) on `device`."""
    import torch
    from transformers import TrainerCallback

    from training.config import load_config

    cuda = device.startswith("cuda")
    common = [f"model_name_or_path={model_dir}", f"output_dir={out}", f"max_steps={steps}", "save_strategy=no",
              "report_to=none", "logging_steps=1", "disable_tqdm=true", "seed=0", "per_device_train_batch_size=4",
              f"use_cpu={str(not cuda).lower()}", f"bf16={str(cuda).lower()}"]  # fmt: skip
    if kind == "sft":
        from training.sft import JudgeSFTConfig as Config
        from training.sft import run_sft as run

        extra = [f"train_file={data / 'sft' / 'train.jsonl'}", "learning_rate=0.001", "max_length=null"]
    else:
        from training.grpo import JudgeGRPOConfig as Config
        from training.grpo import run_grpo as run

        extra = [f"train_file={data / 'rl' / 'train.jsonl'}", "num_generations=4", "max_completion_length=16"]
    config = load_config(Config, None, common + extra)
    history: list[dict[str, Any]] = []
    seen: dict[str, Any] = {}

    class Watch(TrainerCallback):
        def on_train_begin(self, args, state, control, model=None, **kwargs):
            param = next(model.parameters())
            seen.update(model_device=str(param.device.type), model_dtype=str(param.dtype).split(".")[-1])

        def on_log(self, args, state, control, logs=None, **kwargs):
            history.append({k: v for k, v in (logs or {}).items() if isinstance(v, (int, float))})

    started = time.perf_counter()
    result = run(config, callbacks=[Watch()])
    steps_logs = [row for row in history if "loss" in row]
    losses = [row["loss"] for row in steps_logs]
    record: dict[str, Any] = {
        "global_step": result.global_step,
        **seen,
        "losses": [round(x, 4) for x in losses],
        "log_keys": sorted(set().union(*[set(r) for r in steps_logs])) if steps_logs else [],
        "files": sorted(p.name for p in out.iterdir() if p.is_file() and p.suffix in (".json", ".safetensors")),
        "finite": all(math.isfinite(x) for x in losses) and bool(losses),
        "seconds": round(time.perf_counter() - started, 1),
    }
    if kind == "grpo":
        rewards = [row["rewards/judge_reward/mean"] for row in history if "rewards/judge_reward/mean" in row]
        record["rewards"] = [round(r, 4) for r in rewards]
    record["ok"] = result.global_step == steps and record["finite"] and (not cuda or seen["model_device"] == "cuda")
    if cuda:
        record["peak_gpu_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    return record


def train_apart(kind: str, model_dir: Path, data: Path, out: Path, device: str, steps: int) -> dict[str, Any]:
    """`train` in a fresh process: accelerate keeps one device state per process, so a CPU run after a CUDA
    one (or SFT after GRPO) must not share it."""
    spec = dict(kind=kind, model_dir=str(model_dir), data=str(data), out=str(out), device=device, steps=steps)
    command = child_command("--train", json.dumps(spec), "--out", str(out))
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600, env=child_env())
    sys.stderr.write(done.stderr[-4000:])
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        raise RuntimeError(f"{kind} on {device} exited with {done.returncode}: {done.stderr[-1500:]}")
    return json.loads(lines[-1])


def judge_cli(model_dir: Path, items: Path, out: Path, device: str, tokens: int) -> dict[str, Any]:
    """`mrjudge judge --backend hf --device DEVICE`, through the CLI's own entry point."""
    from mrjudge.cli import main as mrjudge

    argv = ["judge", "--model", str(model_dir), "--input", str(items), "--output", str(out), "--backend", "hf",
            "--device", device, "--max-new-tokens", str(tokens)]  # fmt: skip
    started = time.perf_counter()
    returncode = mrjudge(argv)
    rows = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    return {"returncode": returncode, "rows": rows, "seconds": round(time.perf_counter() - started, 1)}


def check_training(
    kind: str, steps: int, model_dir: Path, data: Path, work: Path, device: str, reference: bool
) -> Check:
    """`steps` of `kind` on the device and, with a `reference`, on the CPU: the same log keys and files."""
    ran = train_apart(kind, model_dir, data, work / f"{kind}-{device.replace(':', '')}", device, steps)
    if not reference:
        return ran, ran["ok"]
    ref = train_apart(kind, model_dir, data, work / f"{kind}-ref", "cpu", steps)
    ran["differs_from_cpu"] = [k for k in ("log_keys", "files") if ran[k] != ref[k]]
    ran["cpu_losses"] = ref["losses"]
    return ran, ran["ok"] and ref["ok"] and not ran["differs_from_cpu"]


def check_judge_cli(
    model_dir: Path, data: Path, work: Path, device: str, plan: dict[str, Any], reference: bool
) -> Check:
    """`mrjudge judge` on the same MC items (rl/val.jsonl, images and all) on the device and on the CPU: verdict
    rows of the same kind, and the verdict contract kept."""
    # The file sits beside val.jsonl, so relative image paths resolve as they do for it.
    items = data / "rl" / "gpu_checks_items.jsonl"
    rows = (data / "rl" / "val.jsonl").read_text().splitlines()[: plan["judge_items"]]
    items.write_text("\n".join(rows) + "\n")
    ran = judge_cli(model_dir, items, work / "verdicts-device.jsonl", device, plan["judge_tokens"])
    ref = judge_cli(model_dir, items, work / "verdicts-cpu.jsonl", "cpu", plan["judge_tokens"]) if reference else ran
    differs = same_kind(ran["rows"], ref["rows"]) if ran["rows"] and ref["rows"] else ["no verdicts"]
    differs += verdict_problems(ran["rows"])
    out = {
        "returncode": ran["returncode"],
        "verdicts": len(ran["rows"]),
        "items": len(rows),
        "cpu_returncode": ref["returncode"],
        "differs_from_cpu": differs,
        "choices": [r.get("choice") for r in ran["rows"]],
        "cpu_choices": [r.get("choice") for r in ref["rows"]],
        "sample": ran["rows"][0] if ran["rows"] else None,
        "seconds": ran["seconds"],
    }
    return out, ran["returncode"] == 0 and len(ran["rows"]) == len(rows) and not differs


def check_throughput(model_dir: Path, device: str, plan: dict[str, Any]) -> Check:
    """The judge on the device at the forced length (benchmarks/equal_work.py's rule), batched vs one at a time:
    exactly the expected tokens on both."""
    from benchmarks.judge_throughput import hf_rates, make_items
    from judge.models import load_model

    loaded = load_model(str(model_dir), device=device)
    config = dict(orders=2, max_new_tokens=plan["judge_tokens"], seed=0)
    sample = make_items(2 * plan["judge_items"], 0)
    (batched,), (single,) = hf_rates(loaded, sample, config, 8, repeats=1)
    rates = {"batched": batched, "single": single}
    expected = len(sample) * 2 * plan["judge_tokens"]
    out = {
        "items": len(sample),
        "max_new_tokens": plan["judge_tokens"],
        "dtype": str(next(loaded.model.parameters()).dtype).split(".")[-1],
        "expected_tokens": expected,
        **{f"{k}_tokens": r.tokens for k, r in rates.items()},
        **{f"{k}_tokens_per_s": round(r.tokens_per_s, 1) for k, r in rates.items()},
        **{f"{k}_items_per_s": round(r.items_per_s, 2) for k, r in rates.items()},
        "tokens_equal": all(r.tokens == expected for r in rates.values()),
    }
    return out, out["tokens_equal"]


def soft(record: Record, key: str, check: Callable[[], Check]) -> None:
    """Run one check; its failure is a finding in `record[key]`, and the part goes on to the next."""
    try:
        record[key], record["checks"][key] = check()
    except Exception as exc:  # noqa: BLE001 - fail soft
        record[key] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-1500:]}
        record["checks"][key] = False
    record.save()


def part_cuda_paths(device: str, plan: dict[str, Any], work: Path, record: Record) -> None:
    import torch

    from data_synthesis.pipeline import SynthConfig, run_all
    from tiny_world.model import build_tiny_model

    # The reference runs on the CPU; a CPU run has no other side to compare with (tests check `same_kind`).
    reference = device.startswith("cuda")
    record.update(vlm_size=plan["vlm_size"], reference="cpu" if reference else None, checks={})
    model_dir = build_tiny_model(work / "tiny-vlm", kind="vlm", seed=0, size=plan["vlm_size"])
    data = work / "synth"
    run_all(SynthConfig(out=str(data), world_n=20, assemble={"val_fraction": 0.25}), show_progress=False)

    soft(record, "sft", lambda: check_training("sft", plan["sft_steps"], model_dir, data, work, device, reference))
    soft(record, "grpo", lambda: check_training("grpo", plan["grpo_steps"], model_dir, data, work, device, reference))
    soft(record, "judge_cli", lambda: check_judge_cli(model_dir, data, work, device, plan, reference))
    soft(record, "throughput", lambda: check_throughput(model_dir, device, plan))
    if device.startswith("cuda"):
        record["peak_gpu_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    record["ok"] = all(record["checks"].values())

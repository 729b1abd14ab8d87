"""`python -m benchmarks.gpu_checks`: the flags, each part in its own process within the budget, the summary line.

The same entry serves the children (`children`): `--part NAME` runs one part and writes its record, `--train
SPEC` one training run of the `cuda_paths` part.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import benchmarks.gpu_checks as package
from benchmarks.gpu_checks.children import child_command, child_env
from benchmarks.gpu_checks.cuda_paths import part_cuda_paths, train
from benchmarks.gpu_checks.handoff import part_handoff
from benchmarks.gpu_checks.long_prompts import part_long_prompts
from benchmarks.gpu_checks.plans import PARTS, plan_for
from benchmarks.gpu_checks.record import Record, environment
from benchmarks.kit import ROOT, known_names


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The flags; `out` resolved ($OUT by default) and `parts` as a list of known parts."""
    parser = argparse.ArgumentParser(prog=f"python -m {package.__name__}", description=package.__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda[:i] (the real sizes) or cpu (tiny shapes)")
    parser.add_argument("--out", type=Path, default=None, help="where files go (default: $OUT)")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {','.join(PARTS)}")
    parser.add_argument("--budget-s", type=float, default=None, help="whole-run budget (default: 450 CUDA, 240 CPU)")
    parser.add_argument("--part", choices=PARTS, help=argparse.SUPPRESS)  # the child's entry
    parser.add_argument("--deadline", type=float, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--train", help=argparse.SUPPRESS)  # one training run, in its own process
    args = parser.parse_args(argv)
    args.out = args.out or (Path(os.environ["OUT"]) if os.environ.get("OUT") else None)
    if args.out is None:
        parser.error("--out is required when $OUT is not set")
    args.parts = known_names(parser, "--parts", args.parts, PARTS)
    return args


def run_part(name: str, device: str, out: Path, deadline: float) -> int:
    """The child: run one part, write `<out>/<name>.json` whatever happens."""
    plan = plan_for(device)
    started = time.time()
    record = Record(out / f"{name}.json", part=name, device=device, ok=False)
    try:
        import torch

        torch.manual_seed(0)
        record["env"] = environment(device)
        record.save()
        with tempfile.TemporaryDirectory(prefix=f"gpu_checks.{name}.") as tmp:
            work = Path(tmp)
            if name == "cuda_paths":
                part_cuda_paths(device, plan, work, record)
            elif name == "handoff":
                part_handoff(device, plan, work, record)
            else:
                part_long_prompts(device, plan, work, record, deadline)
    except Exception as exc:  # noqa: BLE001 - fail soft: the record says what broke
        record.update(ok=False, error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc()[-3000:])
    record["seconds"] = round(time.time() - started, 1)
    record.save()
    return 0


def run_train(spec_json: str) -> int:
    """The child of `cuda_paths.train_apart`: one training run, its record as the last line on stdout."""
    spec = json.loads(spec_json)
    record = train(spec["kind"], Path(spec["model_dir"]), Path(spec["data"]), Path(spec["out"]), spec["device"],
                   spec["steps"])  # fmt: skip
    print(json.dumps(record), flush=True)
    return 0


def run_parts(parts: list[str], device: str, out: Path, budget_s: float) -> dict[str, dict[str, Any]]:
    """Each part in a child process, in turn, each killed at its share of what is left of the budget; every
    part's record (what it saved, and why it stopped when it did not finish). The children's output goes to
    `<out>/log.txt`."""
    plan = plan_for(device)
    began = time.time()
    deadline = began + budget_s
    records: dict[str, dict[str, Any]] = {}
    env = child_env()
    with open(out / "log.txt", "w") as log:
        for name in parts:
            left = deadline - time.time()
            if left < 10:
                records[name] = {"ok": False, "error": f"skipped: the budget had {left:.0f} s left", "seconds": 0}
                continue
            share = min(plan["shares"].get(name, 1.0) * (deadline - began), left)
            part_deadline = time.time() + share - 5  # the child wraps up before its kill
            (out / f"{name}.json").unlink(missing_ok=True)
            log.write(f"== {name} ({share:.0f} s at most)\n")
            log.flush()
            command = child_command("--part", name, "--device", device, "--out", str(out), "--deadline",
                                    str(part_deadline))  # fmt: skip
            started = time.time()
            try:
                done = subprocess.run(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=share)
                failure = f"the part's process exited with {done.returncode}" if done.returncode else None
            except subprocess.TimeoutExpired:
                failure = f"killed at its time share ({share:.0f} s)"
            path = out / f"{name}.json"
            records[name] = json.loads(path.read_text()) if path.exists() else {"ok": False}
            if failure and "seconds" not in records[name]:  # the child did not finish: keep what it saved
                records[name].update(ok=False, error=failure, seconds=round(time.time() - started, 1))
            print(f"{name}: {'ok' if records[name].get('ok') else 'FAILED'} in {time.time() - started:.0f} s",
                  file=sys.stderr, flush=True)  # fmt: skip
    return records


def summary(records: dict[str, dict[str, Any]], device: str, wall: float) -> dict[str, Any]:
    """The one JSON line: headline figures and each part's status."""
    paths, handoff, long = (records.get(p, {}) for p in PARTS)
    line: dict[str, Any] = {"benchmark": "gpu_checks", "device": device}
    env = next((r["env"] for r in records.values() if r.get("env")), {})
    line.update({k: env.get(k) for k in ("gpu", "torch", "transformers", "trl")})
    line["parts"] = {
        name: {
            "ok": bool(r.get("ok")),
            "seconds": r.get("seconds"),
            **({"error": r["error"]} if r.get("error") else {}),
        }
        for name, r in records.items()
    }
    line["cuda_paths"] = {k: v for k, v in (paths.get("checks") or {}).items()}
    throughput = paths.get("throughput") or {}
    line["judge_tokens_per_s"] = {k: throughput.get(f"{k}_tokens_per_s") for k in ("batched", "single")}
    line["judge_tokens_equal"] = throughput.get("tokens_equal")
    measurement = handoff.get("measurement") or {}
    line["handoff_model"] = measurement.get("model_shape")
    line["handoff_params"] = measurement.get("params_measured")
    line["time_ratio_measured"] = handoff.get("time_ratio_measured")
    line["handoff_goal_met"] = handoff.get("meets_goal")
    line["adapter_handoff_s"] = measurement.get("adapter_handoff_s")
    line["full_handoff_s"] = measurement.get("full_handoff_s")
    for key in ("max_prompt_plain_g8", "max_prompt_replay_g8", "max_prompt_chunked_g8", "max_prompt_ratio_g8"):
        line[key] = long.get(key)
    line["chunked_replay"] = "present" if (long.get("chunked") or {}).get("available") else "absent"
    line["replay_grad_cosine"] = (long.get("grad") or {}).get("replay_cosine")
    line["cap_mib"] = long.get("cap_mib")
    line["wall_s"] = round(wall, 1)
    return line


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    if args.part:
        return run_part(args.part, args.device, out, args.deadline or math.inf)
    if args.train:
        return run_train(args.train)

    plan = plan_for(args.device)
    if plan.get("threads"):
        os.environ["OMP_NUM_THREADS"] = str(plan["threads"])  # every part's process inherits it
    began = time.time()
    records = run_parts(args.parts, args.device, out, args.budget_s or plan["budget_s"])
    line = summary(records, args.device, time.time() - began)
    (out / "gpu_checks.json").write_text(json.dumps({"summary": line, "parts": records}, indent=1, default=str) + "\n")
    print(json.dumps(line, default=str), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

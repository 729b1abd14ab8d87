"""Multi-process SFT through `accelerate launch`, as the README's multi-node section runs it, on a CPU (gloo).

Two layouts, each with two processes: one machine running both, and two "machines" on loopback (two
launchers with `--num_machines 2 --machine_rank 0/1`, the node-0/node-1 commands of a real multi-node run).
Each rank writes its parameter fingerprint (`rank_fingerprints=true`); both must start from the tiny judge's
weights, see half the data each, and end with identical weights that are the ones saved.

Trap: `accelerate launch --cpu --num_processes 2` (or `distributed_type: MULTI_CPU`) starts ONE process
unless given an mpirun hostfile. `--multi_gpu` is accelerate's torchrun path; on a CPU (`use_cpu: true`)
its workers join a gloo process group.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from judge.loopback import free_port

ROOT = Path(__file__).resolve().parents[2]
ACCELERATE = Path(sys.executable).parent / "accelerate"
MAX_STEPS = 3
BATCH = 2


def _sft_args(tiny_vlm_dir: Path, synth_data: Path, out: Path) -> list[str]:
    """The tiny recipe, as the README's CPU rehearsal runs it, pointed at the test's model and data."""
    return ["-m", "mrjudge.cli", "train", "sft", "--config", "configs/judge_sft_tiny.yaml",
            f"model_name_or_path={tiny_vlm_dir}", f"train_file={synth_data / 'sft' / 'train.jsonl'}",
            f"eval_file={synth_data / 'sft' / 'val.jsonl'}", f"output_dir={out}", f"max_steps={MAX_STEPS}",
            f"per_device_train_batch_size={BATCH}", "save_strategy=no", "report_to=none", "logging_steps=1",
            "disable_tqdm=true", "rank_fingerprints=true"]  # fmt: skip


def _launches(layout: str, sft: list[str]) -> list[list[str]]:
    common = [str(ACCELERATE), "launch", "--multi_gpu", "--mixed_precision", "no", "--dynamo_backend", "no"]
    if layout == "one_machine":
        return [[*common, "--num_processes", "2", "--num_machines", "1", "--main_process_port", "0", *sft]]
    port = str(free_port())
    return [
        [*common, "--num_machines", "2", "--num_processes", "2", "--machine_rank", str(rank),
         "--main_process_ip", "127.0.0.1", "--main_process_port", port, *sft]
        for rank in (0, 1)
    ]  # fmt: skip


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ACCELERATE_", "MASTER_", "TORCHELASTIC_")) and k not in {"RANK", "WORLD_SIZE", "LOCAL_RANK"}}  # fmt: skip
    return {**env, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}


def _run_all(commands: list[list[str]], timeout: float = 300) -> None:
    """Start every launcher at once (a node each), wait for all; on failure show each one's output."""
    procs = [
        subprocess.Popen(c, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
        for c in commands
    ]  # fmt: skip
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=timeout)[0])
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)  # the launcher's own group: it and its workers
                proc.wait()
    failed = [(c, p.returncode, o[-4000:]) for c, p, o in zip(commands, procs, outputs, strict=True) if p.returncode]
    assert not failed, "\n\n".join(f"exit {rc}: {' '.join(c)}\n{o}" for c, rc, o in failed)


@pytest.mark.slow  # two accelerate processes each: 53 and 58 s under load (7 agents on 2 cores)
@pytest.mark.parametrize("layout", ["one_machine", "two_machines"])
def test_two_process_sft_ends_with_identical_weights(layout, tiny_vlm_dir, synth_data, tmp_path):
    from transformers import AutoModelForImageTextToText

    from training.rank_fingerprints import parameter_fingerprint

    out = tmp_path / "sft"
    _run_all(_launches(layout, _sft_args(tiny_vlm_dir, synth_data, out)))

    ranks = [json.loads((out / "rank_fingerprints" / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert sorted(p.name for p in (out / "rank_fingerprints").iterdir()) == ["rank0.json", "rank1.json"]
    n_train = len((synth_data / "sft" / "train.jsonl").read_text().splitlines())
    assert n_train > 2 * BATCH
    for rank, record in enumerate(ranks):
        assert record["rank"] == rank and record["world_size"] == 2 and record["backend"] == "gloo", record
        assert record["global_step"] == MAX_STEPS
        # Each rank iterates over its half: one process alone would take ceil(n / BATCH) batches per epoch.
        assert record["batches_per_epoch"] == math.ceil(n_train / (2 * BATCH)), (record, n_train)
        assert record["epoch"] == pytest.approx(MAX_STEPS / record["batches_per_epoch"])

    initial = parameter_fingerprint(AutoModelForImageTextToText.from_pretrained(tiny_vlm_dir))
    saved = parameter_fingerprint(AutoModelForImageTextToText.from_pretrained(out))
    assert ranks[0]["start"] == ranks[1]["start"] == initial, "both ranks start from the tiny judge"
    assert ranks[0]["end"] == ranks[1]["end"], "data-parallel ranks must end with identical weights"
    assert ranks[0]["end"] != initial, "training changed the weights"
    assert saved == ranks[0]["end"], "the saved judge is the trained one"
    assert (out / "mrjudge_config.yaml").is_file() and (out / "processor_config.json").is_file()

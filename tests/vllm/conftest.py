"""Fixtures for the vLLM tests: the vLLM venv, a servable tiny judge, one `vllm serve` for the session,
the offline engine in a subprocess, and the transformers reference on the same weights.

The vLLM venv is built by `scripts/vllm_env.sh` (`make vllm-env`; `make test` builds it first). Without it
these tests skip with a message saying how to build it, except where `MRJUDGE_REQUIRE_VLLM=1` (set by
`make test`, hence CI): there a missing vLLM fails them.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from judge.backends.vllm_local import REPO, VLLMServer, VLLMUnavailable, python_env, vllm_venv
from tests.support.required import found_or_skip

SERVED_NAME = "tiny-judge"
LOGPROB_ATOL = 1e-4
"""Largest |vLLM - transformers| option log-prob allowed (float32 on both sides). Measured on this CPU with the
tiny32 parrot, 32 requests (64 label log-probs): at most 1.1e-6 through `vllm serve` and through `vllm.LLM`,
with every greedy token equal. A label outside vLLM's top 20 comes back as -inf (OpenAI's limit on
`top_logprobs`); transformers reports it, far below the others."""
ENGINE = {"dtype": "float32", "max_model_len": 2048, "seed": 0, "enable_lora": True, "max_lora_rank": 8}
"""Offline-engine settings (`VLLMBackend` keywords). float32 because vLLM downcasts float32 checkpoints to
bfloat16 by default, which would make the comparison with transformers meaningless."""
SERVE_ARGS = [
    "--dtype",
    "float32",
    "--max-model-len",
    "2048",
    "--seed",
    "0",
    "--enable-lora",
    "--max-lora-rank",
    "8",
    "--enable-prompt-tokens-details",  # usage.prompt_tokens_details.cached_tokens: prefix-cache hits per request
]


@pytest.fixture(scope="session")
def vllm_venv_dir() -> Path:
    return found_or_skip(vllm_venv, VLLMUnavailable, "MRJUDGE_REQUIRE_VLLM")


@pytest.fixture(autouse=True)
def _needs_vllm(vllm_venv_dir):
    """Every test here skips (or, under MRJUDGE_REQUIRE_VLLM=1, fails) first thing when vLLM is missing."""


@pytest.fixture(scope="session")
def vllm_judge_dir(tmp_path_factory) -> Path:
    """A tiny32 judge that answers in the judge format and describes images, in a folder vLLM can load."""
    from judge.backends.hf_compat import write_stock_processor_config
    from tests.vllm.judge_parrot import train_judge_parrot
    from tiny_world.model import build_tiny_model

    base = build_tiny_model(tmp_path_factory.mktemp("tiny32"), size="tiny32", seed=0)
    folder = train_judge_parrot(base, tmp_path_factory.mktemp("tiny32-parrot"), steps=100, seed=0)
    write_stock_processor_config(folder)
    return folder


@pytest.fixture(scope="session")
def vllm_lora_dir(vllm_judge_dir, tmp_path_factory) -> Path:
    """A seeded PEFT LoRA over the judge, strong enough to change every greedy answer."""
    from tests.support.adapters import lora_model

    out = tmp_path_factory.mktemp("tiny32-lora")
    lora_model(vllm_judge_dir, seed=1).save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def hf_loaded(vllm_judge_dir):
    from judge.models import load_model

    return load_model(str(vllm_judge_dir), device="cpu")


@pytest.fixture(scope="module")
def hf(hf_loaded):
    """The tiny32 judge through the transformers backend: the reference the vLLM tests compare with."""
    from judge.backends.hf import TransformersBackend

    return TransformersBackend(hf_loaded)


@pytest.fixture(scope="session")
def vllm_server(vllm_venv_dir, vllm_judge_dir, tmp_path_factory):
    """One `vllm serve` for the whole session, on a free loopback port, with runtime LoRA loading.

    Started without waiting: the offline tests run their engine while it starts (`vllm_url` waits).
    """
    server = VLLMServer(
        vllm_judge_dir,
        venv=vllm_venv_dir,
        served_name=SERVED_NAME,
        args=SERVE_ARGS,
        env={"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"},
        log_path=tmp_path_factory.mktemp("vllm-serve") / "serve.log",
    ).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def vllm_url(vllm_server) -> str:
    return vllm_server.wait()


@pytest.fixture(scope="session")
def run_offline(vllm_venv_dir, vllm_server, tmp_path_factory):
    """`run_offline(spec) -> result`: `tests/vllm/offline_worker.py` in the vLLM venv (see its docstring).

    Asks for `vllm_server` only to start it early: its start-up overlaps the offline engine's.
    """
    folder = tmp_path_factory.mktemp("vllm-offline")
    counter = iter(range(1_000_000))

    def run(spec: dict) -> dict:
        n = next(counter)
        spec_path, out_path, log_path = (folder / f"{n}.{ext}" for ext in ("spec.json", "out.json", "log"))
        spec_path.write_text(json.dumps(spec))
        command = [str(vllm_venv_dir / "bin" / "python"), "-m", "tests.vllm.offline_worker", str(spec_path)]
        with open(log_path, "w") as log:
            done = subprocess.run(
                [*command, str(out_path)],
                cwd=REPO,
                env=python_env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                timeout=280,
                check=False,
            )
        if done.returncode != 0:
            tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-40:])
            raise AssertionError(f"the offline vLLM worker failed ({done.returncode}):\n{tail}")
        return json.loads(out_path.read_text())

    return run


def save_items(items, folder: Path) -> list[dict]:
    """MC items as JSON rows, each in-memory image written to a PNG file the other venv can read."""
    rows = []
    for item in items:
        path = folder / f"{item.id}.png"
        item.image.save(path)
        rows.append({**item.to_dict(), "image": str(path)})
    return rows


def hf_greedy(loaded, request, max_new_tokens: int) -> tuple[list[int], list[int]]:
    """Prompt token ids and greedy new token ids from transformers `generate` (one request, no padding)."""
    import torch

    processor = loaded.processor
    text = processor.apply_chat_template(request.messages, tokenize=False, add_generation_prompt=True)
    inputs = processor(text=[text], images=list(request.images) or None, return_tensors="pt")
    with torch.inference_mode():
        out = loaded.model.generate(
            **inputs,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            temperature=None,
            top_p=None,
            top_k=None,
            pad_token_id=loaded.tokenizer.pad_token_id,
        )
    prompt = inputs["input_ids"][0].tolist()
    new = out[0, len(prompt) :].tolist()
    eos = loaded.model.generation_config.eos_token_id
    eos_ids = {eos} if isinstance(eos, int) else set(eos or [])
    for i, token in enumerate(new):
        if token in eos_ids:
            new = new[: i + 1]  # vLLM reports the stop token too
            break
    return prompt, new

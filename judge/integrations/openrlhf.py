"""OpenRLHF's `.py` reward route: `reward_func(queries, prompts, labels)` backed by `mrjudge serve`.

    export MRJUDGE_REWARD_URL=http://judge-node:8000 MRJUDGE_SERVER_API_KEY=...   # what `mrjudge serve` prints
    python -m openrlhf.cli.train_ppo_ray ... --reward.remote_url /path/to/judge/integrations/openrlhf.py \\
        --rollout.n_samples_per_prompt 4 --data.label_key judge_label     # `mrjudge serve` prints the path

OpenRLHF (main) loads this file with `importlib.util.spec_from_file_location` and calls `reward_func` once
per sample, from a worker thread, with `[query]`, `[prompt]`, `[label]` (label `""` when the dataset has
none). It posts them to the server's `/get_reward` with the bearer key (OpenRLHF's own HTTP route sends
none); the server does the rest with the shared planner (`judge.reward_planner`): it splits the query (VLM
image placeholders collapsed), reads the question out of the chat template, waits for the other samples
of the prompt (start it with `--group-size` = `n_samples_per_prompt`) and judges them listwise, or a lone
sample against its label, or leaves it unscored.

Images: OpenRLHF never sends them to a reward function, so put them in the label as a JSON *judge label*,
`{"reference": "..." | null, "images": ["pics/cat.png"]}`, with paths relative to the server's
`--allow-local-images` folder (or data URLs).

Returns OpenRLHF's dict: `rewards` and `scores` (tensors when torch is importable), and `extra_logs` with
`judge_scored` (0 for an unscored sample, which gets the neutral reward: OpenRLHF has no "skip") and
`judge_group_size`. If the server cannot be reached after retries, every sample gets the neutral reward
with `judge_scored = 0` and `judge_failed = 1`, and a warning is logged: OpenRLHF would otherwise leave the
sample without a reward and fail later in the step.

Its environment names and retry policy are `judge/reward_wire.py`'s, shared with every other reward client.
Besides that module it imports only the standard library (and torch if present): where mr-judge is not
installed, it loads `reward_wire.py` by path from the package folder above its own, so the two files can be
copied to a training node as `judge/integrations/openrlhf.py` and `judge/reward_wire.py`.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

__all__ = ["reward_func"]

logger = logging.getLogger("mrjudge.openrlhf")


def _reward_wire() -> Any:
    """`judge.reward_wire`, imported, or loaded by path beside this file's package when mr-judge is not installed."""
    try:
        from judge import reward_wire
    except ImportError:
        import importlib.util

        path = Path(__file__).resolve().parents[1] / "reward_wire.py"
        spec = importlib.util.spec_from_file_location("mrjudge_reward_wire", path)
        reward_wire = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(reward_wire)
    return reward_wire


wire = _reward_wire()
NEUTRAL_REWARD = 0.5
"""`judge.reward_planner.NEUTRAL_REWARD`, repeated so this file needs nothing but the standard library."""
RETRY = wire.RetryPolicy(max_retries=4, timeout_s=170.0)  # OpenRLHF's own remote call gives up at 180 s
"""Retries of this file's POST; `$MRJUDGE_REWARD_TIMEOUT_S` overrides the timeout per attempt."""


def _endpoint() -> str:
    url = wire.reward_server_url().rstrip("/")
    if url.endswith("/get_reward"):
        return url
    return url.removesuffix("/v1") + "/get_reward"


def _post(body: dict[str, Any]) -> dict[str, Any]:
    """POST with retries on connection errors, 408, 429 and 5xx (back-off with jitter, `Retry-After` honoured)."""
    headers = {"Content-Type": "application/json"}
    key = wire.server_api_key()
    if key:
        headers["Authorization"] = f"Bearer {key}"
    timeout = float(os.environ.get(wire.REWARD_TIMEOUT_ENV) or RETRY.timeout_s)
    data = json.dumps(body).encode()
    error = ""
    for attempt in range(RETRY.max_retries + 1):
        retry_after = None
        try:
            request = urllib.request.Request(_endpoint(), data=data, headers=headers, method="POST")
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            error = f"HTTP {exc.code}: {exc.read()[:300].decode(errors='replace')}"
            if not wire.is_retryable(exc.code):
                break
            retry_after = wire.retry_after_s(exc.headers.get("Retry-After") if exc.headers else None)
        except (OSError, ValueError) as exc:  # refused, reset, timed out, or not JSON
            error = f"{type(exc).__name__}: {exc}"
        if attempt < RETRY.max_retries:
            time.sleep(RETRY.delay(attempt, retry_after=retry_after))
    raise RuntimeError(error)


def _tensor(values: list[float]) -> Any:
    try:
        import torch
    except ImportError:
        return values
    return torch.tensor(values, dtype=torch.float)


def reward_func(queries: list[str], prompts: list[str], labels: list[Any], **kwargs: Any) -> dict[str, Any]:
    """Judge rewards for OpenRLHF samples: `{"rewards", "scores", "extra_logs"}`, one value per query.

    Args:
        queries: prompt + response, as the policy's tokens decode (special tokens kept).
        prompts: the prompts as the dataset gave them (chat template applied, one image placeholder each).
        labels: `""`, a reference answer, or a JSON judge label with `reference` and `images`.
    """
    n = len(queries)
    body = {"query": list(queries), "prompts": list(prompts), "labels": ["" if x is None else x for x in labels]}
    try:
        answer = _post(body)
        rewards = [float(r) for r in answer["rewards"]]
        if len(rewards) != n:
            raise ValueError(f"{len(rewards)} rewards for {n} queries")
        logs = answer.get("extra_logs") or {}
        extra = {name: [float(v) for v in logs[name]] for name in ("judge_scored", "judge_group_size") if name in logs}
        extra["judge_failed"] = [0.0] * n
    except Exception as exc:  # noqa: BLE001 - OpenRLHF cannot skip a sample: neutral, flagged, logged
        logger.warning("mr-judge reward server failed for %d samples (%s); they get %s", n, exc, NEUTRAL_REWARD)
        rewards = [NEUTRAL_REWARD] * n
        extra = {"judge_scored": [0.0] * n, "judge_group_size": [0.0] * n, "judge_failed": [1.0] * n}
    return {
        "rewards": _tensor(rewards),
        "scores": _tensor(list(rewards)),
        "extra_logs": {name: _tensor(values) for name, values in extra.items()},
    }

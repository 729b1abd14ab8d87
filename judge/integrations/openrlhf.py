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

This file imports only the standard library (and torch if present), so it can be copied to a training
node as it is.
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
import urllib.error
import urllib.request
from typing import Any

__all__ = ["reward_func"]

logger = logging.getLogger("mrjudge.openrlhf")

URL_ENV = "MRJUDGE_REWARD_URL"
KEY_ENV = "MRJUDGE_SERVER_API_KEY"
TIMEOUT_ENV = "MRJUDGE_REWARD_TIMEOUT_S"
NEUTRAL_REWARD = 0.5
"""`judge.reward_planner.NEUTRAL_REWARD`, repeated so this file needs nothing but the standard library."""
RETRIES = 4
RETRYABLE = frozenset({408, 429, 500, 502, 503, 504})


def _endpoint() -> str:
    url = os.environ.get(URL_ENV, "").strip().rstrip("/")
    if not url:
        raise RuntimeError(f"set {URL_ENV} to the reward server's address (`mrjudge serve` prints it on start)")
    if url.endswith("/get_reward"):
        return url
    return url.removesuffix("/v1") + "/get_reward"


def _post(body: dict[str, Any]) -> dict[str, Any]:
    """POST with retries on connection errors, 408, 429 and 5xx (back-off with jitter, `Retry-After` honoured)."""
    headers = {"Content-Type": "application/json"}
    key = os.environ.get(KEY_ENV)
    if key:
        headers["Authorization"] = f"Bearer {key}"
    timeout = float(os.environ.get(TIMEOUT_ENV, "170"))  # OpenRLHF's own remote call gives up at 180 s
    data = json.dumps(body).encode()
    error = ""
    for attempt in range(RETRIES + 1):
        delay = min(30.0, 2.0**attempt * random.uniform(0.5, 1.5))
        try:
            request = urllib.request.Request(_endpoint(), data=data, headers=headers, method="POST")
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            error = f"HTTP {exc.code}: {exc.read()[:300].decode(errors='replace')}"
            if exc.code not in RETRYABLE:
                break
            retry_after = exc.headers.get("Retry-After") if exc.headers else None
            if retry_after and retry_after.isdigit():
                delay = max(delay, float(retry_after))
        except (OSError, ValueError) as exc:  # refused, reset, timed out, or not JSON
            error = f"{type(exc).__name__}: {exc}"
        if attempt < RETRIES:
            time.sleep(delay)
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

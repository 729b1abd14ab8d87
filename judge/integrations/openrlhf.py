"""OpenRLHF's `.py` reward route: `reward_func(queries, prompts, labels)` backed by `mrjudge serve`.

    export MRJUDGE_REWARD_URL=http://judge-node:8000 MRJUDGE_SERVER_API_KEY=...   # what `mrjudge serve` prints
    python -m openrlhf.cli.train_ppo_ray ... --reward.remote_url /path/to/judge/integrations/openrlhf.py \\
        --rollout.n_samples_per_prompt 4 --data.label_key judge_label     # `mrjudge serve` prints the path

OpenRLHF (read and run: 0.11.2, `openrlhf.utils.agent.SingleTurnAgentExecutor`) loads this file with
`importlib.util.spec_from_file_location` and calls `reward_func` once per sample, from a worker thread
(`asyncio.to_thread`), with `[query]`, `[prompt]`, `[label]` (label `""` when the dataset has none). It
posts them to the server's `/get_reward` with the bearer key (OpenRLHF's own HTTP route sends none); the
server does the rest with the shared planner (`judge.reward_planner`): it splits the query (VLM
image placeholders collapsed), reads the question out of the chat template, waits for the other samples
of the prompt (start it with `--group-size` = `n_samples_per_prompt`) and judges them listwise, or a lone
sample against its label, or leaves it unscored.

Images: OpenRLHF never sends them to a reward function, so put them in the label as a JSON *judge label*,
`{"reference": "..." | null, "images": ["pics/cat.png"]}`, with paths relative to the server's
`--allow-local-images` folder (or data URLs).

Returns OpenRLHF's dict: `rewards` and `scores` (tensors when torch is importable), and `extra_logs` with
`judge_scored` (0 for a sample the judge could not score, which gets the neutral fill: OpenRLHF has no
"skip") and `judge_group_size`.

Errors are never turned into rewards. A request the server refuses for its input (a missing or out-of-root
image, 413, 415, 422, a wrong key) raises `RewardRefused` with the server's message at once; connection
errors, timeouts, 408, 429 and 5xx are retried (`RETRY`), then raise `RewardUnavailable`. Each is logged
at ERROR first, because OpenRLHF 0.11.2's executor catches whatever `reward_func` raises and logs it at
INFO only; the sample is then left without a reward, and the step stops when the experience maker meets it
(`make_experience_batch`: `reward_model_group is required when rewards are not precomputed`;
`compute_advantages_and_returns` fails on it too).

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
RETRY = wire.RetryPolicy(max_retries=4, timeout_s=170.0)  # OpenRLHF's own remote call gives up at 180 s
"""Retries of this file's POST; `$MRJUDGE_REWARD_TIMEOUT_S` overrides the timeout per attempt."""


def _endpoint() -> str:
    url = wire.reward_server_url().rstrip("/")
    if url.endswith("/get_reward"):
        return url
    return url.removesuffix("/v1") + "/get_reward"


def _server_error(status: int, raw: bytes) -> str:
    """The server's `{"error": {"message", "field"}}` envelope as one line, or the start of what it sent."""
    try:
        error = json.loads(raw).get("error") or {}
        where = f" (field {error['field']!r})" if error.get("field") else ""
        return f"HTTP {status}{where}: {error.get('message') or raw[:200].decode(errors='replace')}"
    except (ValueError, AttributeError):
        return f"HTTP {status}: {raw[:200].decode(errors='replace')}"


def _post(body: dict[str, Any]) -> dict[str, Any]:
    """POST with retries on connection errors, 408, 429 and 5xx (back-off with jitter, `Retry-After` honoured).

    Raises:
        RewardRefused: any other 4xx, at once, with the server's message.
        RewardUnavailable: every attempt failed.
    """
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
            error = _server_error(exc.code, exc.read())
            if not wire.is_retryable(exc.code):
                raise wire.RewardRefused(error, exc.code) from None
            retry_after = wire.retry_after_s(exc.headers.get("Retry-After") if exc.headers else None)
        except (OSError, ValueError) as exc:  # refused, reset, timed out, or not JSON
            error = f"{type(exc).__name__}: {exc}"
        if attempt < RETRY.max_retries:
            time.sleep(RETRY.delay(attempt, retry_after=retry_after))
    raise wire.RewardUnavailable(f"{error} (after {RETRY.max_retries} retries)")


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

    Raises:
        RewardRefused: the server refused the samples (its message names the field, e.g. a missing image).
        RewardUnavailable: the server could not be reached, or kept failing, after `RETRY`'s retries.
    """
    n = len(queries)
    body = {"query": list(queries), "prompts": list(prompts), "labels": ["" if x is None else x for x in labels]}
    try:
        answer = _post(body)
        try:
            rewards = [float(r) for r in answer["rewards"]]
            if len(rewards) != n:
                raise ValueError(f"{len(rewards)} rewards for {n} queries")
        except (KeyError, TypeError, ValueError) as exc:
            raise wire.RewardUnavailable(f"unusable /get_reward answer ({exc}): {str(answer)[:200]}") from None
    except wire.RewardError as exc:  # OpenRLHF logs what reward_func raises at INFO only: say it loudly first
        logger.error("mr-judge: no reward for %d samples from %s: %s", n, _endpoint(), exc)
        raise
    logs = answer.get("extra_logs") or {}
    extra = {name: [float(v) for v in logs[name]] for name in ("judge_scored", "judge_group_size") if name in logs}
    return {
        "rewards": _tensor(rewards),
        "scores": _tensor(list(rewards)),
        "extra_logs": {name: _tensor(values) for name, values in extra.items()},
    }

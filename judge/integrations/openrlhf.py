"""OpenRLHF's `.py` reward route: `reward_func(queries, prompts, labels)` backed by `mrjudge serve`.

    export MRJUDGE_REWARD_URL=http://judge-node:8000 MRJUDGE_SERVER_API_KEY=...   # what `mrjudge serve` prints
    python -m openrlhf.cli.train_ppo_ray ... --reward.remote_url /path/to/judge/integrations/openrlhf.py \\
        --rollout.n_samples_per_prompt 4 --data.label_key judge_label     # `mrjudge serve` prints the path

OpenRLHF (read and run: 0.11.2, `openrlhf.utils.agent.SingleTurnAgentExecutor`) loads this file with
`importlib.util.spec_from_file_location` and calls `reward_func` once per sample, from a worker thread
(`asyncio.to_thread`), with `[query]`, `[prompt]`, `[label]` (label `""` when the dataset has none). It
posts them to the server's `/get_reward` with the bearer key (OpenRLHF's own HTTP route sends none); the
server does the rest with the shared planner (`judge.reward.planner`): it splits the query (VLM
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

Audit (`judge.reward.audit`; it needs mr-judge installed where this file runs): `$MRJUDGE_AUDIT` (JSON:
`{"auditor": "answer_key", "audit_rate": 0.05, "path": "/runs/x/audit.{pid}.jsonl"}`), or an `audit=` keyword
(a mapping or JSON text) for a caller that wraps `reward_func`, turns on the reward audit: one `RewardAudit`
per process, made at the first call, scoring a seeded share beside the reward. Each scored sample goes to it
on its own (the draw is per sample; OpenRLHF sends one per call): its question (out of the chat template),
its response (split off the query), the label's images and the answer key: the label's reference (a plain
label, or a judge label's `reference`), or, where the setting names an `answer_column`, that key of the judge
label (`{"reference": null, "images": [...], "answer": "4"}`: judged listwise, audited against "4"). The step
is this process's count of calls, so `window` counts calls. `{pid}` in `path` gives each process its own
`audit.jsonl` and `audit_windows.jsonl`. The figures are not put in `extra_logs` (OpenRLHF stacks each key
over a batch's samples and fails on a key some samples lack, in `split_experience_batch`, and the figures
appear only as windows close, per process): the files are the output, and each process logs `metrics()` at
INFO as its windows close. The guard only warns here. The audit never changes or delays a reward: a bad
setting raises at the first call, before any request (logged at ERROR first); after that its failures are
logged once and never raised. `self` cannot audit here: a lone sample cannot be judged again as its group was.

Several replicas: `$MRJUDGE_REWARD_URL` may name several servers, comma-separated. OpenRLHF sends a prompt's
samples one per call from concurrent workers, and they must meet on one server to be judged together, so each
sample goes by its prompt and label (`judge.reward.wire.Replicas`, rendezvous hashing: the same ranking in
every process); a replica that cannot be reached is passed over for the next in that ranking, at once.

Its environment names, retry policy and replica choice are `judge/reward/wire.py`'s, shared with every other
reward client.
Besides that module it imports only the standard library (and torch if present; `judge` only when the audit is
on): where mr-judge is not installed, it loads `reward/wire.py` by path from the package folder above its own,
so the two files can be copied to a training node as `judge/integrations/openrlhf.py` and `judge/reward/wire.py`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

__all__ = ["AUDIT_ENV", "reward_audit", "reward_func"]

logger = logging.getLogger("mrjudge.openrlhf")


def _reward_wire() -> Any:
    """`judge.reward.wire`, imported, or loaded by path beside this file's package when mr-judge is not installed."""
    try:
        from judge.reward import wire as reward_wire
    except ImportError:
        import importlib.util

        path = Path(__file__).resolve().parents[1] / "reward" / "wire.py"
        spec = importlib.util.spec_from_file_location("mrjudge_reward_wire", path)
        reward_wire = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(reward_wire)
    return reward_wire


wire = _reward_wire()
RETRY = wire.RetryPolicy(max_retries=4, timeout_s=170.0)  # OpenRLHF's own remote call gives up at 180 s
"""Retries of this file's POST; `$MRJUDGE_REWARD_TIMEOUT_S` overrides the timeout per attempt."""
AUDIT_ENV = "MRJUDGE_AUDIT"
"""The reward audit's setting (JSON) where no `audit` keyword is given (`judge.reward.audit.process.AUDIT_ENV`,
named here too: without an audit this file runs on the standard library alone)."""


def _endpoints() -> Any:
    """The `/get_reward` replicas `$MRJUDGE_REWARD_URL` names (one `Replicas` per process and set of addresses)."""
    return wire.Replicas.shared([wire.get_reward_endpoint(url) for url in wire.reward_server_urls()])


def _sample_key(prompt: str, label: Any) -> str:
    """What routes a sample to a replica: its prompt and label, equal for a prompt's samples in every worker."""
    return hashlib.sha256(json.dumps([prompt, label], default=str).encode()).hexdigest()


def _server_error(status: int, raw: bytes) -> str:
    """The server's `{"error": {"message", "field"}}` envelope as one line, or the start of what it sent."""
    try:
        error = json.loads(raw).get("error") or {}
        where = f" (field {error['field']!r})" if error.get("field") else ""
        return f"HTTP {status}{where}: {error.get('message') or raw[:200].decode(errors='replace')}"
    except (ValueError, AttributeError):
        return f"HTTP {status}: {raw[:200].decode(errors='replace')}"


def _post(body: dict[str, Any], replicas: Any, key: str) -> dict[str, Any]:
    """POST to the replica `key` ranks first, with retries on connection errors, 408, 429 and 5xx (back-off with
    jitter, `Retry-After` honoured) and the next replica at once when one cannot be reached (`wire.Failover`).

    Raises:
        RewardRefused: any other 4xx, at once, with the server's message.
        RewardUnavailable: every attempt failed.
    """
    headers = {"Content-Type": "application/json"}
    api_key = wire.server_api_key()
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    timeout = float(os.environ.get(wire.REWARD_TIMEOUT_ENV) or RETRY.timeout_s)
    data = json.dumps(body).encode()
    failover = wire.Failover(replicas, RETRY, key)
    several = len(replicas) > 1
    error = ""
    while (step := failover.next()) is not None:
        replica, wait_s = step
        time.sleep(wait_s)
        url = replicas.urls[replica]
        where = f"{url}: " if several else ""
        failover.started()
        try:
            request = urllib.request.Request(url, data=data, headers=headers, method="POST")
            with urllib.request.urlopen(request, timeout=timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            retry_after = wire.retry_after_s(exc.headers.get("Retry-After") if exc.headers else None)
            failover.answered(exc.code, retry_after)
            error = where + _server_error(exc.code, exc.read())
            if not wire.is_retryable(exc.code):
                raise wire.RewardRefused(error, exc.code) from None
            continue
        except OSError as exc:  # refused, reset, timed out: the next replica, at once
            failover.unreachable()
            error = f"{where}{type(exc).__name__}: {exc}"
            continue
        except BaseException:
            failover.abandoned()
            raise
        try:
            answer = json.loads(raw)
        except ValueError as exc:  # a 200 that is not JSON: the server's fault, retried (same replica) like a 502
            failover.answered(502)
            error = f"{where}{type(exc).__name__}: {exc}"
            continue
        failover.answered(200)
        return answer
    raise failover.gave_up(error)


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
    labels = ["" if x is None else x for x in labels]
    try:
        audit = _process_audit(kwargs.get("audit"))
    except ValueError as exc:  # OpenRLHF logs what reward_func raises at INFO only: say it loudly first
        logger.error("%s", exc)
        raise
    replicas = _endpoints()
    parts: dict[str, list[int]] = {}  # samples by group: each group goes whole to one replica
    for i, (prompt, label) in enumerate(zip(prompts, labels)):
        parts.setdefault(_sample_key(prompt, label), []).append(i)
    try:
        if len(parts) == 1 or len(replicas) == 1:
            answers = [(list(range(n)), _ask(queries, prompts, labels, range(n), replicas, next(iter(parts), "")))]
        else:  # several groups in one call: each to its own replica, at once
            with ThreadPoolExecutor(min(8, len(parts))) as pool:
                futures = [
                    (indices, pool.submit(_ask, queries, prompts, labels, indices, replicas, key))
                    for key, indices in parts.items()
                ]
                answers = [(indices, future.result()) for indices, future in futures]
    except wire.RewardError as exc:  # OpenRLHF logs what reward_func raises at INFO only: say it loudly first
        logger.error("mr-judge: no reward for %d samples from %s: %s", n, ", ".join(replicas.urls), exc)
        raise
    rewards: list[float] = [0.0] * n
    extra: dict[str, list[float]] = {}
    for indices, (values, logs) in answers:
        for j, i in enumerate(indices):
            rewards[i] = values[j]
        for name, logged in logs.items():
            extra.setdefault(name, [0.0] * n)
            for j, i in enumerate(indices):
                extra[name][i] = logged[j]
    if audit is not None:
        _audit_holder[0].submit(lambda: _sample_groups(audit.config, queries, prompts, labels, rewards, extra))
    return {
        "rewards": _tensor(rewards),
        "scores": _tensor(list(rewards)),
        "extra_logs": {name: _tensor(values) for name, values in extra.items()},
    }


def _ask(
    queries: list[str], prompts: list[str], labels: list[Any], indices: Any, replicas: Any, key: str
) -> tuple[list[float], dict[str, list[float]]]:
    """The rewards and logged values of the samples at `indices`, from one replica."""
    indices = list(indices)
    body = {
        "query": [queries[i] for i in indices],
        "prompts": [prompts[i] for i in indices],
        "labels": [labels[i] for i in indices],
    }
    answer = _post(body, replicas, key)
    try:
        rewards = [float(r) for r in answer["rewards"]]
        if len(rewards) != len(indices):
            raise ValueError(f"{len(rewards)} rewards for {len(indices)} queries")
        logs = answer.get("extra_logs") or {}
        names = ("judge_scored", "judge_group_size")
        extra = {name: [float(v) for v in logs[name]] for name in names if name in logs}
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise wire.RewardUnavailable(f"unusable /get_reward answer ({exc}): {str(answer)[:200]}") from None
    return rewards, extra


# -- the reward audit (judge.reward.audit): one per process, beside the reward -----------------------------

_audit_holder: list[Any] = []  # this process's `judge.reward.audit.process.ProcessAudit`, made when first set
_audit_lock = threading.Lock()


def reward_audit() -> Any:
    """This process's `RewardAudit` (None until a call with an audit setting made it)."""
    return _audit_holder[0].audit if _audit_holder else None


def _process_audit(value: Any) -> Any:
    """This process's audit, made from the first setting seen (`value`, else `$MRJUDGE_AUDIT`); None when off.
    mr-judge is imported only when an audit is set: without one this file needs the standard library only.

    Raises:
        ValueError: a setting that does not read (unknown key, bad value, an auditor that cannot be built), or
            mr-judge not importable here.
    """
    if value is None and not os.environ.get(AUDIT_ENV):
        return None
    try:
        from judge.reward.audit.process import ProcessAudit
    except ImportError as exc:
        raise ValueError(
            f"mr-judge: the reward audit is set but mr-judge cannot be imported here ({exc}); install it "
            f"where OpenRLHF runs this file, or unset ${AUDIT_ENV}"
        ) from exc
    with _audit_lock:
        if not _audit_holder:
            _audit_holder.append(ProcessAudit("OpenRLHF's reward function", "the audit keyword", logger))
    return _audit_holder[0].ensure(value)


def _answer_key(column: str | None, raw: Any, reference: str | None) -> str | None:
    """The audit's gold key for a sample: the judge label's `column` where the setting names one, else the
    label's reference."""
    if not column:
        return reference
    label = raw
    if isinstance(raw, str):
        try:
            label = json.loads(raw)
        except ValueError:
            return None
    value = label.get(column) if isinstance(label, dict) else None
    return None if value is None else (value if isinstance(value, str) else str(value)) or None


def _sample_groups(
    config: Any, queries: list[str], prompts: list[str], labels: list[Any], rewards: list[float], extra: dict
) -> list[Any]:
    """This call's scored samples, each as the audit's group of one: pairwise where the server judged it alone
    (against its reference), else its reward is its share of the `judge_group_size` samples judged with it."""
    from judge.reward.audit import AuditedGroup
    from judge.reward.inputs import decode_label, question_text, split_query

    n = len(queries)
    scored, sizes = extra.get("judge_scored") or [1.0] * n, extra.get("judge_group_size") or [1.0] * n
    groups = []
    for i in range(n):
        if not scored[i]:
            continue  # the fill value, not the judge's
        label = decode_label(labels[i])
        groups.append(
            AuditedGroup(
                prompt=question_text(prompts[i]),
                completions=[split_query(queries[i], prompts[i])[0]],
                rewards=[rewards[i]],
                reference=_answer_key(config.answer_column, labels[i], label.reference),
                images=list(label.images),
                pairwise=sizes[i] <= 1,
                group_size=max(1, int(sizes[i])),
            )
        )
    return groups

"""verl's custom reward function, backed by `mrjudge serve`: `compute_score` (verl ≥ 0.7) and `compute_score_batch`.

verl 0.9 (read: 0.9.1; its default `main_ppo` path), what `mrjudge serve` prints:

    export MRJUDGE_REWARD_URL=http://judge-node:8000 MRJUDGE_SERVER_API_KEY=...
    python -m verl.trainer.main_ppo ... \\
        reward.custom_reward_function.path=/path/to/judge/integrations/verl.py \\
        reward.custom_reward_function.name=compute_score \\
        '+reward.custom_reward_function.reward_kwargs.group_size=${actor_rollout_ref.rollout.n}'

How 0.9.1 calls it: `verl.trainer.ppo.reward.get_custom_reward_fn` loads `reward.custom_reward_function.path`
with `load_extern_object` and, this being a coroutine function, wraps it so that `reward_kwargs` are merged
into every call. Each sample's reward is computed right after it is generated (the agent loop's
`_compute_score`, on a randomly chosen reward-loop worker, a Ray actor), where the `naive` manager's
`run_single` awaits `compute_score(data_source=, solution_str=, ground_truth=, extra_info=)`: one sample
per call, the G rollouts of a prompt in concurrent calls from different processes. No 0.9.1 manager
(dapo, gdpo, naive, rate_limited, remote) sees a prompt's rollouts together, and none passes the sample's
`uid` to `compute_score`. So each call posts its sample to the server's `/get_reward` with `group_size`
(= rollout.n, through the interpolation above), and the server holds it until the other samples with the
same question, images and reference have arrived (or `--group-wait-s` has passed), then judges them
together: listwise for G ≤ 8. The key is the content, not the uid: two rows with the same question,
images and reference in one step share groups of G, which is harmless for listwise judging.

Older verl: 0.7.x and 0.8.x (read: 0.7.1, 0.8.0) call `compute_score` the same way and accept either
spelling of the keys (their `main_ppo` moves `custom_reward_function.*` to `reward.custom_reward_function.*`);
they have no `batch` manager either. verl ≤ 0.6 (read: 0.5.0, 0.6.1) reads the top-level
`custom_reward_function.path/.name` and `reward_model.reward_manager`, and its `batch` manager calls
`compute_score_batch(data_sources=, solution_strs=, ground_truths=, extra_infos=)` once per batch with all
rollouts in it: there use `custom_reward_function.name=compute_score_batch reward_model.reward_manager=batch`
(its naive manager calls `compute_score` synchronously, which this coroutine function cannot serve).

verl passes neither the prompt nor the images to a reward function, so the dataset carries them in
`extra_info`: `question` (text or chat), `images` (paths relative to the server's `--allow-local-images`
folder, data URLs, or `{"bytes": ...}`), and optionally `reference` (else `ground_truth`; `""` is none).

Signal, errors and fill: a sample with no reference and no group (`group_size` unset or 1) can never be
scored, so the first such call raises, naming the fix, rather than train a run on 0.5 for every sample. A
request the server refuses (a missing or out-of-root image, 413, 415, 422, a wrong key) raises
`RewardRefused` with the server's message; connection errors, timeouts, 408, 429 and 5xx are retried
(`RetryPolicy`), then raise `RewardUnavailable`. verl puts each value in a tensor and has no "skip", so
only a sample the judge could not score (an unparsed verdict; a lone sample whose group did not fill in
time and that has no reference) gets the fill value (its group's mean scored reward, else 0.5), with
`judge_scored = 0`, counted in the server's `/metrics`. Every result is a dict with the same keys: `score`,
`judge_scored` (1/0) and `judge_group_size`, which verl logs per key.

reward_kwargs: `compute_score` takes `group_size`, `tournament` ("knockout" | "round_robin", groups above
8), `server_url` (instead of `$MRJUDGE_REWARD_URL`) and the retry policy's `timeout_s`, `max_retries`,
`backoff_s`, `max_backoff_s` (`judge.reward.wire.RetryPolicy`); `compute_score_batch` takes `mode`,
`tournament`, `max_options`, `server_url` and the retry keys. Unknown keys raise, naming the valid ones.

Several replicas: `$MRJUDGE_REWARD_URL` (or `server_url`) may name several servers, comma-separated (or a
list). `compute_score`'s one-sample calls come from many reward-loop workers and must meet on one server to
be judged as a group, so each goes by its group's key (question, reference, images): every worker ranks the
replicas the same way for that key (`judge.reward.wire.Replicas`, rendezvous hashing), and a replica that
cannot be reached is passed over for the next one in that ranking, the same in every worker.
`compute_score_batch` sends whole groups: each goes to the replica with the fewest requests outstanding.

Audit (`judge.reward.audit`): `reward_kwargs.audit` (a mapping, as
`+reward.custom_reward_function.reward_kwargs.audit.auditor=answer_key`, or JSON text), else `$MRJUDGE_AUDIT`
(JSON: `{"auditor": "answer_key", "audit_rate": 0.05, "path": "/runs/x/audit.{pid}.jsonl"}`), turns on the
reward audit: one `RewardAudit` per process, made at the first call, scoring a seeded share beside the reward.
Its answer key is `ground_truth` (or `extra_info[answer_column]` where the setting names one). `compute_score`
hands it each scored sample on its own (the draw is per sample; pairwise where the server judged it alone);
`compute_score_batch` hands it each judged group (and can take the `self` auditor: the group asked again of
the same servers). The step is this process's count of calls (one sample each for `compute_score`, one batch
for `compute_score_batch`), so `window` counts calls. verl's reward loop runs several worker processes, each
with its own audit: `{pid}` in `path` gives each its own `audit.jsonl` and `audit_windows.jsonl` (give an
absolute path: Ray workers do not share a working folder). The figures are not returned to verl (it reads the
first sample's keys for every sample, and the figures appear only as windows close, per process): the files
are the output, and each process logs `metrics()` at INFO as its windows close. The guard only warns here
(`stop` and `keep-best` need a trainer's hook). The audit never changes or delays a score: a bad setting raises
at the first call, before any request (as an unknown reward_kwarg does); after that its failures are logged
once and never raised.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import random
import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from judge.reward.audit import AuditConfig, AuditedGroup, RewardAudit
from judge.reward.audit.process import AUDIT_ENV, ProcessAudit
from judge.reward.inputs import verl_sample
from judge.reward.planner import RewardGroup, fill_unscored, group_samples
from judge.reward.trl.http import HttpJudgeReward, post_json
from judge.reward.wire import (
    CONNECT_TIMEOUT_S,
    Replicas,
    RetryPolicy,
    RewardUnavailable,
    check_keys,
    get_reward_endpoint,
    reward_server_urls,
    server_api_key,
)

__all__ = ["AUDIT_ENV", "NO_SIGNAL", "NO_SIGNAL_BATCH", "compute_score", "compute_score_batch", "reward_audit"]

logger = logging.getLogger("mrjudge.verl")

SAMPLE_OPTIONS = ("group_size", "tournament", "server_url", *RetryPolicy.keys(), "audit")
BATCH_OPTIONS = ("mode", "tournament", "max_options", "server_url", *RetryPolicy.keys(), "audit")
VERL_OWN = ("reward_router_address", "reward_model_tokenizer")
"""Keywords verl 0.9.1's naive manager adds when a reward model is enabled; not ours, ignored."""

NO_SIGNAL = (
    "mr-judge: a sample without a reference was sent to compute_score with no group to judge it in, so it "
    "could never be scored (every such sample would get 0.5: no training signal). verl scores one sample per "
    "call; add '+reward.custom_reward_function.reward_kwargs.group_size=${{actor_rollout_ref.rollout.n}}' "
    "(with actor_rollout_ref.rollout.n >= 2) so that the server judges a prompt's rollouts together, or give "
    "every row a reference (reward_model.ground_truth or extra_info['reference']). Got group_size={group_size}."
)
NO_SIGNAL_BATCH = (
    "mr-judge: {lone} of {groups} prompts in this batch have a single rollout and no reference, so they could "
    "never be scored (0.5 for each: no training signal). Set actor_rollout_ref.rollout.n >= 2 so that the batch "
    "manager judges a prompt's rollouts together, or give every row a reference (reward_model.ground_truth or "
    "extra_info['reference']); pairwise mode always needs a reference."
)


# -- verl 0.7+ : one sample per call, grouped on the server --------------------------------------------------

_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[Any, ...], Any]] = weakref.WeakKeyDictionary()
_clients_lock = threading.Lock()
_unscored = {"count": 0, "calls": 0}


def _sample_options(kwargs: Mapping[str, Any]) -> tuple[list[str], RetryPolicy, int | None, str | None]:
    options = {k: v for k, v in kwargs.items() if k not in VERL_OWN}
    check_keys(options, SAMPLE_OPTIONS, "compute_score reward_kwargs")
    urls = reward_server_urls(_listed(options.get("server_url")))
    retry = RetryPolicy(**{k: options[k] for k in RetryPolicy.keys() if k in options})
    group_size = options.get("group_size")
    if group_size is not None and (isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1):
        raise ValueError(f"reward_kwargs.group_size must be a positive integer (verl's rollout.n), got {group_size!r}")
    return urls, retry, group_size, options.get("tournament")


def _listed(value: Any) -> Any:
    """A Hydra `ListConfig` of addresses as a plain list (a string stays a string)."""
    return value if value is None or isinstance(value, str) else [str(v) for v in value]


def _endpoints(urls: list[str]) -> Replicas:
    """The `/get_reward` replicas of these servers: one object per process, shared by its event loops."""
    return Replicas.shared([get_reward_endpoint(u) for u in urls])


def _client(retry: RetryPolicy) -> Any:
    """One HTTP client per event loop (verl's reward-loop worker runs one), key and timeout, for every replica."""
    import httpx

    api_key = server_api_key()
    key = (api_key, retry.timeout_s)
    with _clients_lock:
        own = _clients.setdefault(asyncio.get_running_loop(), {})  # a client belongs to the loop it was made on
        client = own.get(key)
        if client is None or client.is_closed:
            headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
            timeout = httpx.Timeout(retry.timeout_s, connect=min(CONNECT_TIMEOUT_S, retry.timeout_s))
            client = own[key] = httpx.AsyncClient(timeout=timeout, headers=headers)
        return client


def group_key(question: str, reference: str | None, images: Sequence[Any], group_size: int) -> str:
    """What the server groups a sample by (its question, reference and images, and the group's size), as the
    key that routes it to a replica: equal for a prompt's samples in every worker."""
    refs = [im if isinstance(im, str) else repr(im) for im in images]
    return hashlib.sha256(json.dumps([question, reference, refs, group_size]).encode()).hexdigest()


async def compute_score(
    data_source: Any, solution_str: str, ground_truth: Any, extra_info: Any = None, **kwargs: Any
) -> dict[str, float]:
    """One sample (verl ≥ 0.7's reward loop): judged with the other rollouts of its prompt on the server.

    Returns:
        `{"score", "judge_scored", "judge_group_size"}`; verl trains on `score`.

    Raises:
        ValueError: no question in `extra_info`, bad reward_kwargs, or a sample that can never be scored
            (no reference and no `group_size` ≥ 2: `NO_SIGNAL`).
        RewardRefused: the server refused the sample (its message names the field: a missing image, ...).
        RewardUnavailable: the server could not be reached or kept failing after the retries.
    """
    urls, retry, group_size, tournament = _sample_options(kwargs)
    question, reference, images = verl_sample(solution_str, ground_truth, extra_info)
    if reference is None and (group_size or 1) < 2:
        raise ValueError(NO_SIGNAL.format(group_size=group_size))
    audit = _process_audit(kwargs.get("audit"))
    body: dict[str, Any] = {
        "query": [question + str(solution_str)],  # the server splits the query at its prompt
        "prompts": [question],
        "labels": [{"reference": reference, "images": images}],
        "group_size": group_size or 1,
    }
    if tournament:
        body["tournament"] = tournament
    key = group_key(question, reference, images, body["group_size"])
    response = await post_json(_client(retry), _endpoints(urls), body, retry, key=key, rng=random.Random())
    try:
        answer = response.json()
        reward = float(answer["rewards"][0])
        logs = answer.get("extra_logs") or {}
        scored = float(logs.get("judge_scored", [1.0])[0])
        size = float(logs.get("judge_group_size", [1.0])[0])
    except Exception as exc:  # noqa: BLE001 - a malformed answer is the server's fault, not a zero reward
        raise RewardUnavailable(f"unusable /get_reward answer ({exc}): {response.text[:200]}") from exc
    _unscored["calls"] += 1
    if not scored:
        _unscored["count"] += 1
        if _unscored["count"] in (1, 10, 100) or _unscored["count"] % 1000 == 0:
            logger.warning(
                "mr-judge: %d of %d samples unscored so far (an unparsed verdict, or a group that did not fill "
                "within the server's --group-wait-s and has no reference); they get %s with judge_scored = 0 (%s)",
                _unscored["count"], _unscored["calls"], reward, "; ".join(answer.get("notes") or []) or "no note",
            )  # fmt: skip
    if audit is not None:
        _AUDIT.submit(
            lambda: [_sample_group(audit.config, question, str(solution_str), reward, ground_truth, extra_info,
                                   images, size)] if scored else [],
        )  # fmt: skip
    return {"score": reward, "judge_scored": scored, "judge_group_size": size}


# -- verl ≤ 0.6 : the batch manager, grouped here --------------------------------------------------------

_rewarders: dict[tuple[Any, ...], HttpJudgeReward] = {}
_lock = threading.Lock()


def _rewarder(options: dict[str, Any]) -> HttpJudgeReward:
    """One reward function (and so one connection pool) per process and configuration."""
    urls = reward_server_urls(_listed(options.pop("server_url", None)))
    retry = RetryPolicy(**{k: options.pop(k) for k in RetryPolicy.keys() if k in options})
    key = (tuple(urls), server_api_key(), retry, tuple(sorted(options.items())))
    with _lock:
        if key not in _rewarders:
            _rewarders[key] = HttpJudgeReward(
                urls, reference_column="reference", image_columns=("images",), send_image_paths=True,
                retry=retry, **options,
            )  # fmt: skip
        return _rewarders[key]


def compute_score_batch(
    data_sources: Sequence[Any],
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[Any],
    **kwargs: Any,
) -> list[dict[str, float]]:
    """A whole batch (verl ≤ 0.6's `batch` manager): each prompt's rollouts judged together, listwise.

    Returns:
        one `{"score", "judge_scored", "judge_group_size"}` per sample, in order.

    Raises:
        ValueError: as `compute_score` (a prompt with one rollout and no reference: `NO_SIGNAL_BATCH`).
        RewardRefused, RewardUnavailable: as `compute_score`, for any group of the batch.
    """
    n = len(solution_strs)
    if len(ground_truths) != n or len(extra_infos) != n:
        raise ValueError(f"got {n} solution_strs, {len(ground_truths)} ground_truths, {len(extra_infos)} extra_infos")
    options = {k: v for k, v in kwargs.items() if k not in VERL_OWN}
    check_keys(options, BATCH_OPTIONS, "compute_score_batch reward_kwargs")
    audit_setting = options.pop("audit", None)
    rewarder = _rewarder(dict(options))
    read = [verl_sample(s, g, e) for s, g, e in zip(solution_strs, ground_truths, extra_infos)]
    questions, references, images = [r[0] for r in read], [r[1] for r in read], [r[2] for r in read]
    responses = [str(s) for s in solution_strs]
    # The same groups the reward function judges (same planner, same keys), for the check, the fill and the logs.
    groups = group_samples(
        questions, responses, image_keys=[tuple(im) for im in images], references=references,
        mode=rewarder.mode, tournament=rewarder.tournament, max_options=rewarder.max_options,
    )  # fmt: skip
    lone = [g for g in groups if g.request is None]
    if lone:
        raise ValueError(NO_SIGNAL_BATCH.format(lone=len(lone), groups=len(groups)))
    audit = _process_audit(audit_setting, rejudge=rewarder._rejudge)
    rewards = rewarder(questions, responses, reference=references, images=images)
    if audit is not None:
        _AUDIT.submit(lambda: _batch_groups(audit.config, groups, rewards, ground_truths, extra_infos, images))
    size = [0] * n
    for group in groups:
        for i in group.indices:
            size[i] = len(group.indices)
    unscored = sum(r is None for r in rewards)
    if unscored:
        logger.warning(
            "mr-judge: %d of %d responses unscored (the judge's verdict did not parse); they get the fill value "
            "with judge_scored = 0", unscored, n,
        )  # fmt: skip
    filled = fill_unscored(rewards, groups)
    return [
        {"score": value, "judge_scored": 0.0 if raw is None else 1.0, "judge_group_size": float(g)}
        for value, raw, g in zip(filled, rewards, size)
    ]


# -- the reward audit (judge.reward.audit): one per process, beside the score ------------------------------

_AUDIT = ProcessAudit("verl's reward function", "reward_kwargs.audit", logger)


def reward_audit() -> RewardAudit | None:
    """This process's reward audit (None until a call with an audit setting made it)."""
    return _AUDIT.audit


def _process_audit(value: Any, rejudge: Any = None) -> RewardAudit | None:
    """This process's audit, made from the first setting seen (`value`, else `$MRJUDGE_AUDIT`); None when off."""
    return _AUDIT.ensure(value, rejudge)


def _answer_key(config: AuditConfig, ground_truth: Any, extra_info: Any) -> str | None:
    """The audit's gold key for a sample: `extra_info[answer_column]` where the setting names a column, else
    `ground_truth` (`""`: none)."""
    if config.answer_column:
        value = extra_info.get(config.answer_column) if isinstance(extra_info, Mapping) else None
    else:
        value = ground_truth
    if value is None:
        return None
    return (value if isinstance(value, str) else str(value)) or None


def _sample_group(
    config: AuditConfig,
    question: str,
    solution: str,
    reward: float,
    ground_truth: Any,
    extra_info: Any,
    images: Sequence[Any],
    size: float,
) -> AuditedGroup:
    """One scored sample as the audit's group of one: pairwise where the server judged it alone (against its
    reference), else its reward is its share of the `size` samples judged with it."""
    return AuditedGroup(
        prompt=question,
        completions=[solution],
        rewards=[reward],
        reference=_answer_key(config, ground_truth, extra_info),
        images=list(images),
        pairwise=size <= 1,
        group_size=max(1, int(size)),
    )


def _batch_groups(
    config: AuditConfig,
    groups: Sequence[RewardGroup],
    rewards: Sequence[float | None],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[Any],
    images: Sequence[Sequence[Any]],
) -> list[AuditedGroup]:
    """The judged groups of a batch as the audit sees them (each keyed by its first sample's answer)."""
    return [
        AuditedGroup(
            prompt=group.prompt,
            completions=list(group.responses),
            rewards=[rewards[i] for i in group.indices],
            reference=_answer_key(config, ground_truths[group.indices[0]], extra_infos[group.indices[0]]),
            images=list(images[group.indices[0]]),
            pairwise=group.request.mode == "pairwise",
        )
        for group in groups
        if group.request is not None and any(rewards[i] is not None for i in group.indices)
    ]

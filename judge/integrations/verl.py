"""verl's custom reward function, backed by `mrjudge serve`: `compute_score` (per sample) and `compute_score_batch`.

    export MRJUDGE_REWARD_URL=http://judge-node:8000 MRJUDGE_SERVER_API_KEY=...   # what `mrjudge serve` prints
    python -m verl.trainer.main_ppo ... \\
        custom_reward_function.path=/path/to/judge/integrations/verl.py \\
        custom_reward_function.name=compute_score_batch reward_model.reward_manager=batch

verl loads this file by path (`verl.utils.import_utils.load_extern_object`) and calls, by keyword,
`compute_score(data_source=, solution_str=, ground_truth=, extra_info=)` once per sample (the naive and
reward-loop managers) or `compute_score_batch(data_sources=, solution_strs=, ground_truths=, extra_infos=)`
once per batch (`reward_model.reward_manager=batch`), with `custom_reward_function.reward_kwargs` merged in.
Only the batch manager sees a prompt's G rollouts together, so only it can judge them listwise; per sample,
a response is judged against its reference (`ground_truth`) or, with none, left unscored.

verl passes neither the prompt nor the images to a reward function, so the dataset carries them in
`extra_info`: `question` (text or chat), `images` (paths relative to the server's `--allow-local-images`
folder, data URLs, or `{"bytes": ...}`), and optionally `reference` (else `ground_truth`; `""` is none).

Grouping, mode choice and the unscored rule are the shared planner's (`judge.reward_planner`, through
`judge.reward_http.HttpJudgeReward`). verl puts each value in a tensor, so it has no "skip": an unscored
response gets `fill_unscored`'s value (its group's mean scored reward, else 0.5). Every result is a dict
with the same keys: `score`, `judge_scored` (1/0) and `judge_group_size`, which verl logs per key.

reward_kwargs (optional): `mode` ("listwise" | "pairwise" | "tournament"), `tournament`, `max_options`,
`server_url` (instead of `$MRJUDGE_REWARD_URL`), and the retry policy's `timeout_s`, `max_retries`,
`backoff_s`, `max_backoff_s` (`judge.reward_wire.RetryPolicy`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

from judge.reward_http import HttpJudgeReward
from judge.reward_inputs import verl_sample
from judge.reward_planner import fill_unscored, group_samples
from judge.reward_wire import RetryPolicy, reward_server_url, server_api_key

__all__ = ["compute_score", "compute_score_batch"]

logger = logging.getLogger("mrjudge.verl")

OPTIONS = ("mode", "tournament", "max_options", "server_url", *RetryPolicy.keys())

_rewarders: dict[tuple[Any, ...], HttpJudgeReward] = {}
_lock = threading.Lock()


def _rewarder(options: dict[str, Any]) -> HttpJudgeReward:
    """One reward function (and so one connection pool) per process and configuration."""
    url = reward_server_url(options.pop("server_url", None))
    retry = RetryPolicy(**{k: options.pop(k) for k in RetryPolicy.keys() if k in options})
    key = (url, server_api_key(), retry, tuple(sorted(options.items())))
    with _lock:
        if key not in _rewarders:
            _rewarders[key] = HttpJudgeReward(
                url, reference_column="reference", image_columns=("images",), send_image_paths=True,
                retry=retry, **options,
            )  # fmt: skip
        return _rewarders[key]


def _score(
    solution_strs: Sequence[str], ground_truths: Sequence[Any], extra_infos: Sequence[Any], kwargs: dict[str, Any]
) -> list[dict[str, float]]:
    n = len(solution_strs)
    if len(ground_truths) != n or len(extra_infos) != n:
        raise ValueError(f"got {n} solution_strs, {len(ground_truths)} ground_truths, {len(extra_infos)} extra_infos")
    options = {k: kwargs[k] for k in OPTIONS if k in kwargs}
    rewarder = _rewarder(dict(options))
    read = [verl_sample(s, g, e) for s, g, e in zip(solution_strs, ground_truths, extra_infos)]
    questions, references, images = [r[0] for r in read], [r[1] for r in read], [r[2] for r in read]
    responses = [str(s) for s in solution_strs]
    rewards = rewarder(questions, responses, reference=references, images=images)
    # The same groups the reward function judged (same planner, same keys), for the fill and the logs.
    groups = group_samples(
        questions, responses, image_keys=[tuple(im) for im in images], references=references,
        mode=rewarder.mode, tournament=rewarder.tournament, max_options=rewarder.max_options,
    )  # fmt: skip
    size = [0] * n
    for group in groups:
        for i in group.indices:
            size[i] = len(group.indices)
    unscored = sum(r is None for r in rewards)
    if unscored:
        logger.warning(
            "mr-judge: %d of %d responses unscored (no reference for a lone response, an unparsed verdict, or a "
            "failed request); they get the neutral reward with judge_scored = 0", unscored, n,
        )  # fmt: skip
    filled = fill_unscored(rewards, groups)
    return [
        {"score": value, "judge_scored": 0.0 if raw is None else 1.0, "judge_group_size": float(g)}
        for value, raw, g in zip(filled, rewards, size)
    ]


def compute_score(
    data_source: Any, solution_str: str, ground_truth: Any, extra_info: Any = None, **kwargs: Any
) -> dict[str, float]:
    """One sample (verl's naive / reward-loop managers): judged against its reference, else unscored.

    Returns:
        `{"score", "judge_scored", "judge_group_size"}`; verl trains on `score`.
    """
    return _score([solution_str], [ground_truth], [extra_info], kwargs)[0]


def compute_score_batch(
    data_sources: Sequence[Any],
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[Any],
    **kwargs: Any,
) -> list[dict[str, float]]:
    """A whole batch (verl's `batch` manager): each prompt's rollouts judged together, listwise.

    Returns:
        one `{"score", "judge_scored", "judge_group_size"}` per sample, in order.
    """
    return _score(list(solution_strs), list(ground_truths), list(extra_infos), kwargs)

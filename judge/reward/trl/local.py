"""The judge reward with the judge in this process: all groups in one `compute_rewards` batch.

    from judge.reward.trl.local import InProcessJudgeReward

    reward = InProcessJudgeReward("runs/judge", judge_config={"orders": 2}, reference_column="answer")
    GRPOTrainer(model=..., reward_funcs=[reward], train_dataset=prompts)

The batch is the same engine the server runs (`judge.reward.scoring.compute_rewards`). A batch that fails
is retried (`retry`), then judged group by group to find the groups that fail, which are counted and
logged: input the judge refuses (such as an unreadable image) then raises `RewardRefused`; a judge that
keeps failing leaves its groups `None` (no signal), as the HTTP reward does in an outage.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any

from judge.reward.planner import RewardGroup
from judge.reward.scoring import RewardRequest, RewardResult, compute_rewards
from judge.reward.trl.base import GroupedJudgeReward, GroupResults, RewardCall
from judge.reward.wire import RewardRefused, RewardUnavailable

__all__ = ["InProcessJudgeReward"]


class InProcessJudgeReward(GroupedJudgeReward):
    """Rewards from a judge loaded in this process, with TRL's reward signature.

    Args:
        judge: a `judge.judging.Judge`, or a model folder / hub id / OpenAI-compatible `/v1` URL to build one
            from (lazily, with `judge_config`, `backend`, `backend_kwargs`); a path keeps this object
            picklable, a `Judge` object is pickled as it is.
        judge_config: a `JudgeConfig` or a mapping of its fields, for a judge built from a path.
        backend, backend_kwargs: the engine a judge built from a path runs on (`judge.backends.make_backend`).
        **options: how groups are judged and retried (`judge.reward.trl.base.GroupedJudgeReward`); only
            `retry.max_retries` and the back-off apply here.
    """

    def __init__(
        self,
        judge: Any,
        *,
        judge_config: Any = None,
        backend: str | None = None,
        backend_kwargs: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> None:
        if judge is None:
            raise ValueError("InProcessJudgeReward needs a judge: a Judge object, or a model folder / hub id / URL")
        self.judge = judge
        self.judge_config, self.backend, self.backend_kwargs = judge_config, backend, dict(backend_kwargs or {})
        super().__init__(**options)

    def _init_runtime(self) -> None:
        super()._init_runtime()
        self._local_judge: Any = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(judge={self.judge!r}, mode={self.mode!r})"

    def _judge_object(self) -> Any:
        if not isinstance(self.judge, str):
            return self.judge
        if self._local_judge is None:
            from judge.backends import make_backend
            from judge.judging import Judge, JudgeConfig

            config = self.judge_config if self.judge_config is not None else JudgeConfig()
            if isinstance(config, Mapping):
                config = JudgeConfig(**config)
            backend = make_backend(self.judge, self.backend, **self.backend_kwargs)
            self._local_judge = Judge(backend, config, image_root=self.image_root)
        return self._local_judge

    def _compute(self, requests: list[RewardRequest]) -> list[RewardResult]:
        with self._lock:  # models are not thread-safe
            return compute_rewards(self._judge_object(), requests, max_options=self.max_options)

    def _judge_groups(self, groups: list[RewardGroup], call: RewardCall) -> GroupResults:
        """All groups in one batch; if that fails for good, group by group, so one bad group sinks only itself."""
        todo = [g for g in groups if g.request is not None]
        requests = [g.request for g in todo]
        assert all(r is not None for r in requests)
        results: dict[int, list[float | None] | None] = {}
        batch = self._with_retries(lambda: self._compute(requests), call) if requests else []  # type: ignore[arg-type]
        if batch is not None:
            results = {id(g): list(r.rewards) for g, r in zip(todo, batch)}
            call.reasoning.update({id(g): [v.reasoning for v in r.verdicts] for g, r in zip(todo, batch)})
        else:
            for g in todo:
                one = self._with_retries(lambda g=g: self._compute([g.request]), call, retries=0, record=True)
                results[id(g)] = list(one[0].rewards) if one is not None else None
                if one is not None:
                    call.reasoning[id(g)] = [v.reasoning for v in one[0].verdicts]
        return [results.get(id(g)) for g in groups]

    async def _ajudge_groups(self, groups: list[RewardGroup], call: RewardCall) -> GroupResults:
        return await asyncio.to_thread(self._judge_groups, groups, call)  # the model runs off the event loop

    def _with_retries(
        self, fn: Callable[[], Any], call: RewardCall, retries: int | None = None, record: bool = False
    ) -> Any:
        """`fn()`, retried; None when it fails for good (recorded in `call.failures` with `record`: one group's)."""
        from judge.images import ImageLoadError
        from judge.types import DataError

        retries = self.retry.max_retries if retries is None else retries
        for attempt in range(retries + 1):
            try:
                return fn()
            except (DataError, ImageLoadError) as exc:  # input the judge refuses: trying again changes nothing
                call.errors.append(str(exc))
                if record:
                    call.failures.append(RewardRefused(str(exc)))
                return None
            except Exception as exc:  # noqa: BLE001 - counted and logged, then raised by `_finish`
                call.errors.append(f"{type(exc).__name__}: {exc}")
                if attempt == retries:
                    if record:
                        call.failures.append(RewardUnavailable(f"{type(exc).__name__}: {exc}"))
                    return None
                call.retries += 1
                time.sleep(self.retry.delay(attempt, self._rng))
        return None

"""The rewards `benchmarks.reward_audit` trains with beside the served judge's own: the judge with a planted
length bonus (a blind spot a policy can find), and the answer key handed to an audit as the judge rewards are."""

from __future__ import annotations

from typing import Any

from judge.reward.audit import AuditConfig, AuditedGroup, RewardAudit
from judge.reward.trl.http import AsyncHttpJudgeReward
from tiny_world.seeing_policy import OracleReward

__all__ = ["AuditedOracleReward", "LengthBonusReward"]


class LengthBonusReward(AsyncHttpJudgeReward):
    """The served judge's pairwise reward `p` plus a stated length bonus, kept in [0, 1] by rescaling:
    `(p + bonus * min(1, words / target_words)) / (1 + bonus)`, applied to the group results before the reward
    path's `_finish` (so the audit, which runs there, audits the reward the trainer gets). Rescaled rather than
    clipped at 1: clipped, the answers the judge already pays well all earn 1 whatever their length."""

    def __init__(self, url: str, *, bonus: float, target_words: int, **options: Any) -> None:
        super().__init__(url, **options)
        self.bonus, self.target_words = bonus, target_words

    def biased(self, reward: float, text: str) -> float:
        """`reward` with the length bonus, rescaled into [0, 1]."""
        return (reward + self.bonus * min(1.0, len(text.split()) / self.target_words)) / (1.0 + self.bonus)

    def _finish(self, n, groups, results, call, start, kwargs):  # type: ignore[no-untyped-def]
        biased = [
            None
            if result is None
            else [None if r is None else self.biased(r, t) for r, t in zip(result, group.responses)]
            for group, result in zip(groups, results)
        ]
        return super()._finish(n, groups, biased, call, start, kwargs)


class AuditedOracleReward:
    """TRL reward function: the answer key (`OracleReward`), each prompt's completions handed to a `RewardAudit`
    as the judge rewards hand theirs (`build_policy_trainer` adds the audit's callback, as for them). Its 0/1
    rewards are read against one half, as a pairwise reward is (`AuditedGroup.pairwise`)."""

    __name__ = "oracle"

    def __init__(self, audit: dict[str, Any]) -> None:
        self.key = OracleReward()
        self.audit = RewardAudit(AuditConfig.from_value(audit))  # type: ignore[arg-type]
        self.calls = 0

    def __call__(self, prompts: list[Any], completions: list[Any], answer: list[str], **kwargs: Any) -> list[float]:
        from judge.reward.inputs import completion_text, image_digest, prompt_text

        rewards = self.key(prompts, completions, answer, **kwargs)
        images = kwargs.get("images") or [[] for _ in prompts]
        groups: dict[tuple[Any, ...], AuditedGroup] = {}
        for prompt, completion, reference, reward, own in zip(prompts, completions, answer, rewards, images):
            own = [] if own is None else list(own) if isinstance(own, list | tuple) else [own]
            text = prompt_text(prompt)
            key = (text, reference, tuple(image_digest(image) for image in own))
            group = groups.setdefault(key, AuditedGroup(text, [], [], reference, own, pairwise=True))
            group.completions.append(completion_text(completion))
            group.rewards.append(reward)
        state = kwargs.get("trainer_state")
        self.audit.submit(list(groups.values()), int(state.global_step) if state is not None else self.calls)
        self.calls += 1
        log_metric = kwargs.get("log_metric")
        if log_metric is not None:
            for name, value in self.audit.metrics(f"{self.__name__}/audit").items():
                log_metric(name, value)
        return rewards

"""`POST /get_reward`: OpenRLHF's remote reward protocol, read into planner samples and judged in groups.

OpenRLHF (0.11.2, `SingleTurnAgentExecutor`) posts one sample per request, without images or auth:
`{"query": [prompt + response], "prompts": [prompt], "labels": [label]}`, and reads back
`{"rewards", "scores", "extra_logs"}`; verl 0.9's reward loop, through `judge/integrations/verl.py`, does the
same per sample, with its `group_size`. The G samples of one prompt are generated concurrently, so their
requests arrive close together: with a group size > 1 (the request's `group_size`, else the server's) the
server holds each sample in a `GroupPool` under its (prompt, images, reference) key until that many are there
(or `group_wait_s` has passed), then judges them as one group through the shared planner
(`judge.reward.planner`).

Each query is split with `judge.reward.inputs.split_query` (image placeholders expanded to N pad tokens are
collapsed first), the question is read out of the chat template, and the label is decoded as a reference
and/or image references (paths are read under `--allow-local-images`). OpenRLHF cannot skip a sample, so an
unscored one gets `fill_unscored`'s value and `extra_logs.judge_scored = 0`, and is counted in `/metrics`.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from judge.reward.inputs import decode_label, question_text, split_query
from judge.reward.planner import RewardGroup, fill_unscored, group_samples, plan_cost
from judge.reward.scoring import RewardRequest, RewardResult
from reward_server.config import ServerConfig
from reward_server.errors import invalid, too_large
from reward_server.fields import fit_text
from reward_server.protocol import GetRewardRequest
from reward_server.wire_images import ImageBudget

__all__ = ["GroupPool", "Outcome", "Sample", "judge_samples", "openrlhf_answer", "read_samples"]


@dataclass
class Sample:
    """One OpenRLHF query, read for the judge."""

    prompt: str
    """The question (user turns of the chat template, image placeholders removed)."""
    response: str
    reference: str | None
    images: list[Any]
    """The images (label images first, then the request's own `images`), header-read `PendingImage`s until the
    work is submitted, when they are decoded (shrunk to the judge's `max_pixels`)."""
    image_key: tuple[str, ...]
    """Digests of the image references: samples group by it."""
    split: bool
    """False when the query did not start with its prompt (the whole query is judged as the response)."""
    refs: list[str] = field(default_factory=list)
    """The image references as the client sent them (label images first), in the order of `images`: what the
    reward audit records."""

    @property
    def key(self) -> tuple[Any, ...]:
        return (self.prompt, self.image_key, self.reference)


@dataclass
class Outcome:
    """A sample's reward (`None`: unscored, with the reason) and the size of the group it was judged in."""

    reward: float | None
    filled: float
    """The reward, or for an unscored sample `fill_unscored`'s value over its group (OpenRLHF has no skip)."""
    group_size: int
    reason: str = ""
    """"no_reference" (alone, no label), "unparsed" (the judge's verdict did not parse) or ""."""
    done: Any = field(default=None, repr=False)
    """The batcher's `Done` for the submission that judged it (timings), if any."""


def _digest(ref: str) -> str:
    return hashlib.sha1(ref.encode()).hexdigest()[:16]


def read_samples(body: GetRewardRequest, config: ServerConfig) -> list[Sample]:
    """The samples of a checked `/get_reward` body: each query split into prompt and response, its label
    decoded, its images (the label's, then its own) read at the header against the request's pixel budget."""
    n = len(body.query)
    labels, own_images = body.labels or [None] * n, body.images or [None] * n
    budget = ImageBudget(config)
    samples = []
    for i, (query, prompt, label, own) in enumerate(zip(body.query, body.prompts, labels, own_images)):
        try:
            judge_label = decode_label(label)
        except ValueError as exc:
            field_name, _, message = str(exc).partition(": ")
            raise invalid(f"labels[{i}]{field_name.removeprefix('label')}", message) from None
        if judge_label.reference is not None:
            fit_text(judge_label.reference, config, f"labels[{i}].reference")
        own = [own] if isinstance(own, str) else list(own or [])
        refs = [*judge_label.images, *own]
        if len(refs) > config.max_images:
            raise too_large(f"labels[{i}].images", f"{len(refs)} images is above max_images ({config.max_images})")
        response, split = split_query(query, prompt)
        samples.append(
            Sample(
                prompt=question_text(prompt),
                response=fit_text(response, config, f"query[{i}]"),
                reference=judge_label.reference,
                images=[
                    *budget.images(judge_label.images, f"labels[{i}].images"),
                    *budget.images(own, f"images[{i}]"),
                ],
                image_key=tuple(_digest(r) if isinstance(r, str) else "" for r in refs),
                split=split,
                refs=refs,
            )
        )
    return samples


Submit = Callable[[list[RewardRequest], int], Awaitable[tuple[list[RewardResult], Any]]]
"""Queue reward requests of a given total cost for the judge; returns their results and the batcher's `Done`."""
Judged = Callable[[list[RewardGroup], list[RewardResult]], None]
"""Told of the planned groups (their `indices` into the samples) and their results once judged (the audit)."""


async def judge_samples(
    samples: Sequence[Sample], submit: Submit, *, tournament: str, max_options: int, judged: Judged | None = None
) -> list[Outcome]:
    """Plan `samples` with the shared planner, judge every planned group in one submission, scatter back
    (`judged`, if given, hears of the judged groups first)."""
    groups = group_samples(
        [s.prompt for s in samples],
        [s.response for s in samples],
        images=[s.images for s in samples],
        image_keys=[s.image_key for s in samples],
        references=[s.reference for s in samples],
        tournament=tournament,  # type: ignore[arg-type]
        max_options=max_options,
    )
    planned = [g for g in groups if g.request is not None]
    results: list[RewardResult] = []
    done = None
    if planned:
        requests = [g.request for g in planned]
        results, done = await submit(requests, sum(plan_cost(r) for r in requests))  # type: ignore[arg-type]
        if judged is not None:
            judged(planned, results)
    by_group = {id(g): r.rewards for g, r in zip(planned, results)}
    outcomes: list[Outcome | None] = [None] * len(samples)
    for group in groups:
        rewards = by_group.get(id(group))
        values = list(rewards) if rewards is not None else [None] * len(group.indices)
        for index, reward, filled in zip(group.indices, values, fill_unscored(values)):
            reason = "no_reference" if rewards is None else "unparsed" if reward is None else ""
            outcomes[index] = Outcome(reward, filled, len(group.indices), reason, done)
    return [o for o in outcomes if o is not None]


class GroupPool:
    """Holds one-sample requests until their group is whole (`group_size`, or the size a request asks for) or
    has waited `wait_s`.

    Only touched from the event loop, so it needs no lock. A flush judges the group's samples together and
    answers each waiting request; an error (a full queue, a timeout) answers all of them with that error.
    """

    def __init__(self, group_size: int, wait_s: float) -> None:
        self.group_size = group_size
        self.wait_s = wait_s
        self._pending: dict[
            tuple[Any, ...], list[tuple[Sample, asyncio.Future, Callable[[list[Sample]], Awaitable[list[Outcome]]]]]
        ] = {}
        self._timers: dict[tuple[Any, ...], asyncio.TimerHandle] = {}

    @property
    def waiting(self) -> int:
        return sum(len(v) for v in self._pending.values())

    def add(
        self,
        key: tuple[Any, ...],
        sample: Sample,
        run: Callable[[list[Sample]], Awaitable[list[Outcome]]],
        size: int | None = None,
    ) -> asyncio.Future:
        """Put `sample` in its group (of `size`, default `group_size`; keep the size in `key`); the future
        resolves to its `Outcome` once the group is judged."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()
        members = self._pending.setdefault(key, [])
        members.append((sample, future, run))
        if len(members) >= (size or self.group_size):
            self._flush(key)
        elif len(members) == 1:
            self._timers[key] = loop.call_later(self.wait_s, self._flush, key)
        return future

    def _flush(self, key: tuple[Any, ...]) -> None:
        members = self._pending.pop(key, [])
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        if members:
            asyncio.get_running_loop().create_task(self._judge(members))

    @staticmethod
    async def _judge(members: list[tuple[Sample, asyncio.Future, Any]]) -> None:
        run = members[-1][2]
        try:
            outcomes = await run([sample for sample, _, _ in members])
        except BaseException as exc:  # noqa: BLE001 - every waiting request must hear about it
            for _, future, _ in members:
                if not future.done():
                    future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for (_, future, _), outcome in zip(members, outcomes):
            if not future.done():
                future.set_result(outcome)


def openrlhf_answer(samples: Sequence[Sample], outcomes: Sequence[Outcome], start: float) -> dict[str, Any]:
    """OpenRLHF's answer: `rewards` and `scores` (unscored filled, see `fill_unscored`), `extra_logs` per sample."""
    raw = [o.reward for o in outcomes]
    filled = [o.filled for o in outcomes]
    notes = []
    lone = sum(o.reason == "no_reference" for o in outcomes)
    if lone:
        notes.append(
            f"{lone} samples had no other response to the same prompt and no reference label: unscored "
            "(extra_logs.judge_scored = 0); set --group-size to OpenRLHF's n_samples_per_prompt, or give labels"
        )
    unparsed = sum(o.reason == "unparsed" for o in outcomes)
    if unparsed:
        notes.append(f"{unparsed} samples were unscored: the judge's verdict did not parse")
    unsplit = sum(not s.split for s in samples)
    if unsplit:
        notes.append(f"{unsplit} queries did not start with their prompt; the whole query was judged")
    return {
        "rewards": filled,
        "scores": list(filled),
        "extra_logs": {
            "judge_scored": [0.0 if r is None else 1.0 for r in raw],
            "judge_group_size": [float(o.group_size) for o in outcomes],
        },
        "notes": notes,
        "timing": {"total_ms": round(1000 * (time.perf_counter() - start), 3)},
    }

"""What the official protocols of VL-RewardBench and Multimodal RewardBench send the same way: the request
(one user turn, text then image) and the decoding taken from the run's config."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from eval.pairwise import PairItem
from judge.backends.base import ChatRequest, SamplingParams
from judge.judging import batch_seed

__all__ = ["OfficialDecoding", "official_request", "official_sampling"]


class OfficialDecoding(Protocol):
    """What an official run's config says about decoding (`VLRBConfig`, `MMRBConfig`)."""

    temperature: float
    top_p: float
    max_new_tokens: int
    seed: int


def official_sampling(config: OfficialDecoding, items: Sequence[PairItem]) -> SamplingParams:
    """The config's decoding for one batch of items, seeded from the config's seed and the batch."""
    return SamplingParams(
        max_new_tokens=config.max_new_tokens,
        temperature=config.temperature,
        top_p=config.top_p,
        seed=batch_seed(config.seed, items),
    )


def official_request(text: str, image: Any) -> ChatRequest:
    """One official call: a single user turn, the text part first and then the image, as both official clients send."""
    messages = [{"role": "user", "content": [{"type": "text", "text": text}, {"type": "image"}]}]
    return ChatRequest(messages=messages, images=[image])

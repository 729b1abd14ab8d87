"""A `Backend` that judges MC prompts by a rule, so reward arithmetic can be checked by hand.

It reads the lettered candidates out of the MC prompt it is sent and answers
`<think>…</think><answer>X</answer>` for the candidate carrying the highest `score=N` tag (the first on a
tie; `abstain` anywhere makes it write no answer). It stands in for a trained judge, which cannot be had
on a CPU in a test, and goes through the real prompt builder, display orders and parser. The benchmarks'
servers use it too (`benchmarks.server_load`'s fault and hostile runs, `benchmarks.judge_outage`): a judge
with no model cost, so a run measures the server and not the model.

- `RuleJudgeBackend`: the rule (after `delay_s` per backend call, if given), counting its calls and requests;
  it keeps nothing per request, so a long benchmark's server does not grow by it.
- `SlowRuleBackend`: the rule, recording each batch's size and its images' sizes (for tests).
- `ScoredRuleBackend`: the rule with option log-probs (the softmax of the `score=N` tags).
"""

from __future__ import annotations

import math
import re
import string
import threading
import time

from judge.backends.base import Generation

CANDIDATE = re.compile(r"^([A-Z])\. (.*)$", re.MULTILINE)
SCORE = re.compile(r"score=(\d+)")


def prompt_text(request) -> str:
    """The text part of a chat request's last message (the MC prompt)."""
    return next(p["text"] for p in request.messages[-1]["content"] if p.get("type") == "text")


def option_scores(text: str) -> list[int]:
    """Each lettered candidate's `score=N` in an MC prompt, in display order (0 where it carries none).

    >>> option_scores("Which is best?\\nA. score=2 red\\nB. blue\\nC. score=7")
    [2, 0, 7]
    """
    return [int(m.group(1)) if (m := SCORE.search(body)) else 0 for _, body in CANDIDATE.findall(text)]


def best_letter(text: str) -> str:
    """The letter of the candidate with the highest `score=N` (the first among equals; A when none is listed).

    >>> best_letter("Which is best?\\nA. score=2 red\\nB. blue\\nC. score=7")
    'C'
    """
    scores = option_scores(text)
    return string.ascii_uppercase[max(range(len(scores)), key=lambda i: (scores[i], -i), default=0)]


class RuleJudgeBackend:
    name = "rule"

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.calls = 0
        self.requests = 0

    def generate(self, requests, params):
        time.sleep(self.delay_s)  # even 0: it lets the server's other threads run, as a model's call would
        self.calls += 1
        self.requests += len(requests)
        out = []
        for request in requests:
            text = prompt_text(request)
            if any("abstain" in body for _, body in CANDIDATE.findall(text)):
                out.append(Generation(text="<think>cannot tell</think>"))
                continue
            out.append(Generation(text=f"<think>highest score</think><answer>{best_letter(text)}</answer>"))
        return out


class SlowRuleBackend(RuleJudgeBackend):
    """The rule judge, slowed down, recording the size of every backend batch (in chat requests).

    With a small judge `batch_size`, a request that expands to many items becomes a long job of many
    backend calls: what cancellation and shutdown tests need.
    """

    def __init__(self, delay_s: float = 0.0) -> None:
        super().__init__(delay_s)
        self.batches: list[int] = []
        self.image_sizes: list[tuple[int, int]] = []
        self.started = threading.Event()

    def generate(self, requests, params):
        self.started.set()
        self.batches.append(len(requests))
        self.image_sizes.extend(image.size for request in requests for image in request.images)
        return super().generate(requests, params)


class ScoredRuleBackend(SlowRuleBackend):
    """The rule judge with option log-probs: each candidate's probability is the softmax of its `score=N`, so a
    listwise group of G gets G distinct non-zero rewards (a plain rule judge gives one 1.0 and zeros).

    It records, per chat request, how many candidates it showed and the colours of its images (each image's
    centre pixel), so a test can see that a prompt's responses were judged together and that the images
    reached the judge.
    """

    def __init__(self) -> None:
        super().__init__()
        self.shown: list[dict] = []

    def generate(self, requests, params):
        out = super().generate(requests, params)
        for request, generation in zip(requests, out):
            text = prompt_text(request)
            scores = option_scores(text)
            colours = [image.convert("RGB").getpixel((image.width // 2, image.height // 2)) for image in request.images]
            self.shown.append({"candidates": [body for _, body in CANDIDATE.findall(text)], "image_colours": colours})
            if generation.label_logprobs is None and "<answer>" in generation.text:
                top = max(scores)
                norm = top + math.log(sum(math.exp(s - top) for s in scores))
                generation.label_logprobs = [s - norm for s in scores]
        return out

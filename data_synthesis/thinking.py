"""Reading a thinking model's reply, in every form servers give it.

A reasoning model (QwQ-32B, DeepSeek-R1) thinks first, then answers. Depending on how it is served the
thinking arrives:

- in a separate field: vLLM's reasoning parsers (`vllm serve --reasoning-parser deepseek_r1`) return it as
  `message.reasoning` (called `reasoning_content` before vLLM 0.11, and still so by DeepSeek's API), with
  only the final answer in `content`;
- inside `content` as `<think>…</think>answer`;
- inside `content` without the opening tag, `…</think>answer`: the chat templates of QwQ and R1 put
  `<think>\\n` into the prompt, so the model only writes the closing tag.

A reply cut at the token budget (`finish_reason: "length"`) is `truncated`, whatever it holds.

>>> r = read_reply("Checking A and B...</think>\\n<answer>B</answer>")
>>> (r.thinking, r.body)
('Checking A and B...', '<answer>B</answer>')
>>> read_reply("<think>plan</think><think>trace</think><answer>A</answer>").thinking
'plan'
>>> read_reply("<think>trace</think><answer>A</answer>").thinking is None  # one block: the body's own
True
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from judge.backends.base import Generation

__all__ = ["THINK_BLOCK", "Reply", "read_reply", "reply_tokens", "think_blocks"]

THINK_BLOCK = re.compile(r"<think>(.*?)</think>", re.DOTALL)
_OPEN, _CLOSE = "<think>", "</think>"


@dataclass(frozen=True)
class Reply:
    """A model reply split into the model's own thinking and what it wrote after it."""

    thinking: str | None
    """The model's native thinking (reasoning field, or the leading think block); None when there is none."""
    body: str
    """What the model wrote after thinking: the answer the prompt asked for."""
    truncated: bool
    """Cut at the token budget: never kept."""
    tokens: int = 0
    """Completion tokens, where the server counted them."""


def think_blocks(text: str) -> list[str]:
    """The contents of every closed `<think>…</think>` block in `text`, stripped."""
    return [m.group(1).strip() for m in THINK_BLOCK.finditer(text)]


def _split(text: str) -> tuple[str | None, str]:
    """(native thinking, body) from one content string."""
    close = text.find(_CLOSE)
    open_ = text.find(_OPEN)
    if close >= 0 and (open_ < 0 or close < open_):
        return text[:close].strip(), text[close + len(_CLOSE) :].strip()  # the template opened the block
    stripped = text.lstrip()
    if stripped.startswith(_OPEN):
        first_end = stripped.find(_CLOSE)
        if first_end >= 0 and _OPEN in stripped[first_end:]:
            # Two blocks: the model's own thinking, then the block the prompt asked it to write.
            return stripped[len(_OPEN) : first_end].strip(), stripped[first_end + len(_CLOSE) :].strip()
    return None, text.strip()


def read_reply(reply: Generation | str) -> Reply:
    """Split a reply (a backend `Generation`, or plain text) into thinking and body; flag truncation."""
    if isinstance(reply, str):
        reply = Generation(text=reply)
    text = reply.text or ""
    tokens = reply.completion_tokens
    truncated = reply.finish_reason == "length"
    if reply.reasoning:
        thinking, body = reply.reasoning.strip(), text.strip()
    else:
        thinking, body = _split(text)
        if thinking is None and _OPEN in body and _CLOSE not in body[body.rfind(_OPEN) :]:
            truncated = True  # an unclosed think block: the model stopped mid-thought
    return Reply(thinking=thinking or None, body=body, truncated=truncated, tokens=tokens)


def reply_tokens(replies: list[Reply]) -> int:
    return sum(r.tokens for r in replies)

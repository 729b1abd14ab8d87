"""What RL frameworks hand a reward function, read into the planner's samples (prompt, response, reference, images).

- **TRL** calls a reward function with `prompts`, `completions` and the dataset's columns; a prompt or a
  completion is a string, or chat messages whose content is a string or typed parts. `prompt_text`,
  `completion_text` and `prompt_images` read them, for the judge rewarding a policy (`judge.reward`)
  and for the judge's own GRPO reward (`training.judge_reward`) alike.

Neither OpenRLHF nor verl sends images (or, in verl, the prompt) to a reward function, so they travel in the
fields that do reach it, and the reward server reads image paths under its `--allow-local-images` folder:

- **OpenRLHF** posts `{"query": [prompt + response], "prompts": [prompt], "labels": [label]}` per sample.
  `query` is the policy's decoded tokens: for a VLM the image placeholder is expanded to N
  `<|image_pad|>` tokens (one in `prompt`), and the response ends in the end-of-turn token. The label is
  `""` when the dataset has none, a plain reference answer, or a *judge label*, a JSON object
  `{"reference": "..." | null, "images": ["pics/cat.png", ...]}` (as a string or an object).
- **verl** calls `compute_score(data_source, solution_str, ground_truth, extra_info)`: the question comes
  from `extra_info["question"]` (or `"prompt"`), images from `extra_info["images"]`, the reference from
  `extra_info["reference"]` if present, else `ground_truth` (`""`: none).

    >>> split_query("<|im_start|>user\\n<|vision_start|><|image_pad|><|image_pad|><|vision_end|>Hi?<|im_end|>\\n"
    ...             "<|im_start|>assistant\\nHello.<|im_end|>", "<|im_start|>user\\n<|vision_start|><|image_pad|>"
    ...             "<|vision_end|>Hi?<|im_end|>\\n<|im_start|>assistant\\n")
    ('Hello.', True)
    >>> question_text("<|im_start|>system\\nBe brief.<|im_end|>\\n<|im_start|>user\\n<|vision_start|><|image_pad|>"
    ...               "<|vision_end|>What colour?<|im_end|>\\n<|im_start|>assistant\\n")
    'What colour?'
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "JudgeLabel",
    "completion_text",
    "decode_label",
    "image_digest",
    "prompt_images",
    "prompt_text",
    "question_text",
    "split_query",
    "verl_sample",
]

MEDIA_PADS = ("<|image_pad|>", "<|video_pad|>", "<image_soft_token>", "<image>", "<|IMAGE|>")
"""Image placeholder tokens a processor repeats N times per image (Qwen2/2.5/3-VL, Gemma 3, LLaVA)."""
_PAD_RUNS = re.compile("|".join(f"(?:{re.escape(t)}){{2,}}" for t in MEDIA_PADS))
_MEDIA = re.compile(
    r"<\|vision_start\|>.*?<\|vision_end\|>|<start_of_image>.*?<end_of_image>|"
    + "|".join(re.escape(t) for t in MEDIA_PADS),
    re.S,
)
END_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "<end_of_turn>", "<eos>", "</s>")
"""End-of-turn / end-of-text tokens a decoded response may end with (OpenRLHF decodes with special tokens)."""
_USER_TURNS = (
    re.compile(r"<\|im_start\|>user\n(.*?)(?:<\|im_end\|>|$)", re.S),  # ChatML: Qwen
    re.compile(r"<\|start_header_id\|>user<\|end_header_id\|>\n\n(.*?)(?:<\|eot_id\|>|$)", re.S),  # Llama 3
    re.compile(r"<start_of_turn>user\n(.*?)(?:<end_of_turn>|$)", re.S),  # Gemma
)


def _collapse_pads(text: str) -> str:
    return _PAD_RUNS.sub(lambda m: next(t for t in MEDIA_PADS if m.group(0).startswith(t)), text)


def strip_end_tokens(response: str) -> str:
    """The response without trailing end-of-turn tokens and whitespace.

    >>> strip_end_tokens("Red.<|im_end|><|endoftext|>")
    'Red.'
    """
    text = response.rstrip()
    while True:
        for token in END_TOKENS:
            if text.endswith(token):
                text = text[: -len(token)].rstrip()
                break
        else:
            return text


def split_query(query: str, prompt: str) -> tuple[str, bool]:
    """The response part of an OpenRLHF query, and whether the query was found to start with its prompt.

    Runs of an image placeholder (the processor's expansion) are collapsed on both sides before comparing.
    When the query does not start with the prompt even so, the whole query is the response (`False`).
    """
    if query.startswith(prompt):
        return strip_end_tokens(query[len(prompt) :]), True
    collapsed_query, collapsed_prompt = _collapse_pads(query), _collapse_pads(prompt)
    if collapsed_query.startswith(collapsed_prompt):
        return strip_end_tokens(collapsed_query[len(collapsed_prompt) :]), True
    return strip_end_tokens(query), False


def question_text(prompt: str) -> str:
    """The question a (possibly chat-templated) prompt asks: its user turns, without image placeholders.

    A prompt with no recognised template is returned as is (placeholders removed).
    """
    for pattern in _USER_TURNS:
        turns = pattern.findall(prompt)
        if turns:
            return "\n\n".join(t for t in (_MEDIA.sub("", turn).strip() for turn in turns) if t)
    return _MEDIA.sub("", prompt) if _MEDIA.search(prompt) else prompt


@dataclass
class JudgeLabel:
    """A label read for the judge: the reference answer (None: none) and image references."""

    reference: str | None
    images: list[Any] = field(default_factory=list)


def decode_label(label: Any) -> JudgeLabel:
    """An OpenRLHF label: `""`/None (no reference), a reference string, or a JSON judge label.

    >>> decode_label('{"reference": "4", "images": ["a.png"]}'), decode_label("")
    (JudgeLabel(reference='4', images=['a.png']), JudgeLabel(reference=None, images=[]))

    Raises:
        ValueError: a judge label whose fields have the wrong types (names the field).
    """
    if label is None:
        return JudgeLabel(None)
    if isinstance(label, str):
        stripped = label.strip()
        if not (stripped.startswith("{") and stripped.endswith("}")):
            return JudgeLabel(label or None)
        try:
            parsed = json.loads(stripped)
        except ValueError:
            return JudgeLabel(label)  # a reference answer that happens to look like an object
        if not isinstance(parsed, dict) or not {"reference", "images"} & parsed.keys():
            return JudgeLabel(label)
        label = parsed
    if not isinstance(label, Mapping):
        raise ValueError(f"label: expected a string or a judge-label object, got {type(label).__name__}")
    reference = label.get("reference")
    if reference is not None and not isinstance(reference, str):
        raise ValueError("label.reference: expected a string or null")
    images = label.get("images") or []
    if isinstance(images, str):
        images = [images]
    if not isinstance(images, list) or not all(isinstance(i, str) for i in images):
        raise ValueError("label.images: expected a list of image paths or data URLs")
    return JudgeLabel(reference or None, list(images))


def _image_ref(value: Any, where: str) -> str:
    """An image reference the server accepts: a path or data URL as is, HF `{"bytes", "path"}` as a data URL."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        if value.get("bytes"):
            return "data:image/png;base64," + base64.b64encode(bytes(value["bytes"])).decode()
        path = value.get("path") or value.get("image")
        if isinstance(path, str) and path:
            return path
    raise ValueError(f"{where}: expected an image path, a data URL or {{'bytes': ...}}, got {type(value).__name__}")


def verl_sample(
    solution_str: str, ground_truth: Any, extra_info: Mapping[str, Any] | None
) -> tuple[str, str | None, list[str]]:
    """(question, reference, image references) for one verl sample.

    Raises:
        ValueError: no question in `extra_info` (verl does not pass the prompt), or unreadable images.
    """
    extra = extra_info if isinstance(extra_info, Mapping) else {}
    question = extra.get("question", extra.get("prompt"))
    if question is not None and not isinstance(question, (str, Mapping)) and hasattr(question, "__iter__"):
        # a chat (a list, or the numpy array a parquet list becomes): its user turns
        question = prompt_text(list(question))
    if not isinstance(question, str) or not question:
        raise ValueError(
            "extra_info['question'] is missing: verl does not pass the prompt to compute_score, so put the "
            "question text (or the chat) in extra_info['question'] when preprocessing the dataset"
        )
    reference = extra.get("reference", ground_truth)
    if reference is not None and not isinstance(reference, str):
        reference = str(reference)
    raw = extra.get("images")
    if raw is None:  # not `or []`: parquet lists arrive as numpy arrays, which have no truth value
        raw = []
    if isinstance(raw, (str, Mapping)):
        raw = [raw]
    images = [_image_ref(v, f"extra_info['images'][{j}]") for j, v in enumerate(list(raw))]
    return question_text(question), reference or None, images


# -- TRL: prompts and completions as strings or chat messages ----------------------------------------------


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "".join(
            part.get("text") or "" for part in content if isinstance(part, Mapping) and part.get("type") == "text"
        )
    return ""


def prompt_text(prompt: Any) -> str:
    """The question a prompt asks: a string as is, else the text of its user turns (system turns and images left out).

    >>> prompt_text([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Why?"}])
    'Why?'
    """
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Sequence):
        turns = [_content_text(m.get("content")) for m in prompt if isinstance(m, Mapping) and m.get("role") == "user"]
        return "\n\n".join(t for t in turns if t)
    return str(prompt)


def completion_text(completion: Any) -> str:
    """A completion's answer: a string as is, else the text of its last assistant message.

    >>> completion_text([{"role": "assistant", "content": [{"type": "text", "text": "Red."}]}])
    'Red.'
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Sequence) and completion:
        turns = [m for m in completion if isinstance(m, Mapping)]
        answer = next((m for m in reversed(turns) if m.get("role") == "assistant"), turns[-1] if turns else None)
        return _content_text(answer.get("content")) if answer else ""
    return ""


def prompt_images(prompt: Any) -> list[Any]:
    """Images carried inside conversational prompt messages (`{"type": "image", "image": <PIL>}`, as TRL fills them)."""
    if not isinstance(prompt, Sequence) or isinstance(prompt, str):
        return []
    return [
        part["image"]
        for message in prompt
        if isinstance(message, Mapping) and isinstance(message.get("content"), list)
        for part in message["content"]
        if isinstance(part, Mapping) and part.get("type") == "image" and part.get("image") is not None
    ]


def image_digest(ref: Any) -> str:
    """A content hash, so the G copies of one dataset image (separate objects) fall into one group."""
    digest = hashlib.sha1()
    if hasattr(ref, "tobytes") and hasattr(ref, "size"):  # PIL image
        digest.update(f"{ref.mode}{ref.size}".encode())
        digest.update(ref.tobytes())
    elif isinstance(ref, (bytes, bytearray)):
        digest.update(bytes(ref))
    elif isinstance(ref, Mapping):  # datasets' Image feature: {"bytes", "path"}
        digest.update(ref.get("bytes") or str(ref.get("path")).encode())
    else:
        digest.update(str(ref).encode())
    return digest.hexdigest()

"""Text-reasoning distillation: MR. Judge's four steps from an MC item to a judge trace.

1. describe the image (`data_synthesis.describe`, an earlier stage; the description is in the item);
2. a *text* reasoning model reads the description, the question, the lettered options and a subtle hint of
   the right option, and writes its judgement (`ModelReasoner`); on the synthetic world a deterministic
   `SceneReasoner` writes a faithful per-option comparison against the scene instead;
3. a pass removes every trace of the hint;
4. a pass aligns the style ("the description says" → "the image shows").

Steps 3 and 4 run through a model (`ModelRewriter`) or fixed rules (`RuleRewriter`); the rules also run
after the model as a last guard. A trace is kept only if its final answer equals the label, it has the
`<think>…</think><answer>X</answer>` form, and no hint wording is left. Every row records the prompt
versions it was made with and, when dropped, why.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from typing import Any, Protocol

from data_synthesis.prompts import HINT_REMOVAL, REASON, STYLE_ALIGN, hint_sentence, lettered
from judge.backends.base import Backend, ChatRequest, SamplingParams
from judge.parser import extract_reasoning, parse_answer
from judge.prompt import option_letters

__all__ = ["Distiller", "ModelReasoner", "ModelRewriter", "RuleRewriter", "SceneReasoner", "summarize_distilled"]

Row = dict[str, Any]

HINT_TRACE = re.compile(r"\b(hint|annotator|preferred option|was told|reference answer)\b", re.IGNORECASE)
_HINT_SENTENCE = re.compile(
    r"[^.!?\n<>]*\b(hint|annotator|preferred option|was told|reference answer)\b[^.!?\n<>]*[.!?]?\s*", re.IGNORECASE
)
_STYLE_RULES = (
    (re.compile(r"\b[Tt]he (image )?description (says|states|mentions|shows|notes)\b"), "the image shows"),
    (re.compile(r"\b[Aa]ccording to the (image )?description\b"), "in the image"),
    (re.compile(r"\b[Tt]he (image )?description\b"), "the image"),
    (re.compile(r"\bis described as\b"), "appears as"),
    (re.compile(r"\bdescribed\b"), "shown"),
)


class Reasoner(Protocol):
    tag: str

    def __call__(self, items: list[Row]) -> list[str]: ...


class Rewriter(Protocol):
    tags: dict[str, str | None]

    def __call__(self, texts: list[str]) -> tuple[list[str], list[str]]:
        """(hint removed, style aligned) for each text."""
        ...


class SceneReasoner:
    """The synthetic world's deterministic reasoner: checks every option against the scene (no hint needed).

    `style` is `world.scene_reasoner`'s: "diff" (natural sentences), "restate" (facts restated per
    option) or "contrast" (the options compared with each other, then only the disputed slot checked).
    """

    def __init__(self, style: str = "diff") -> None:
        self.style = style
        self.tag = f"scene_reasoner:{style}"

    def __call__(self, items: list[Row]) -> list[str]:
        from data_synthesis.world import Scene, Task, scene_reasoner

        out = []
        for item in items:
            world = item["meta"].get("world")
            if world is None:
                raise ValueError(
                    f"item {item['id']!r} has no synthetic-world scene; use --reasoner model for other data"
                )
            scene, task = Scene.from_dict(world["scene"]), Task.from_dict(world["task"])
            out.append(scene_reasoner(scene, task, item["question"], item["candidates"], style=self.style))
        return out


class ModelReasoner:
    """A text reasoning model (any backend; text-only requests) judging from the description, with a hint."""

    tag = REASON.tag

    def __init__(self, backend: Backend, *, max_new_tokens: int = 1024, temperature: float = 0.0) -> None:
        self.backend, self.params = backend, SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature)

    def __call__(self, items: list[Row]) -> list[str]:
        requests = []
        for item in items:
            letter = option_letters(len(item["candidates"]))[item["label"]]
            text = REASON.format(
                description=item["meta"].get("description", ""),
                question=item["question"],
                options=lettered(item["candidates"]),
                hint=hint_sentence(letter),
            )
            requests.append(ChatRequest(messages=[{"role": "user", "content": text}]))
        return [g.text for g in self.backend.generate(requests, self.params)]


def strip_hint(text: str) -> str:
    """Drop every sentence that mentions the hint."""
    return _HINT_SENTENCE.sub("", text)


def align_style(text: str) -> str:
    """Speak as one who sees the image."""
    for pattern, replacement in _STYLE_RULES:
        text = pattern.sub(replacement, text)
    return text


class RuleRewriter:
    """Steps 3 and 4 by fixed rules: drop hint sentences, rewrite description talk as image talk."""

    tags: dict[str, str | None] = {"hint_removal": "rules@v1", "style_align": "rules@v1"}

    def __call__(self, texts: list[str]) -> tuple[list[str], list[str]]:
        dehinted = [strip_hint(t) for t in texts]
        return dehinted, [align_style(t) for t in dehinted]


class ModelRewriter:
    """Steps 3 and 4 by a text model (batched), each followed by the rules as a guard."""

    def __init__(self, backend: Backend, *, max_new_tokens: int = 1024) -> None:
        self.backend, self.params = backend, SamplingParams(max_new_tokens=max_new_tokens)
        self.tags = {"hint_removal": HINT_REMOVAL.tag, "style_align": STYLE_ALIGN.tag}

    def _rewrite(self, prompt: Any, texts: list[str]) -> list[str]:
        requests = [ChatRequest(messages=[{"role": "user", "content": prompt.format(text=t)}]) for t in texts]
        return [g.text for g in self.backend.generate(requests, self.params)]

    def __call__(self, texts: list[str]) -> tuple[list[str], list[str]]:
        dehinted = [strip_hint(t) for t in self._rewrite(HINT_REMOVAL, texts)]
        return dehinted, [align_style(t) for t in self._rewrite(STYLE_ALIGN, dehinted)]


class Distiller:
    """Steps 2–4 and the keep/drop decision for a batch of MC items (a `run_stage` process function)."""

    def __init__(self, reasoner: Reasoner, rewriter: Rewriter) -> None:
        self.reasoner, self.rewriter = reasoner, rewriter

    def __call__(self, items: list[Row]) -> list[Row]:
        raw = self.reasoner(items)
        dehinted, styled = self.rewriter(raw)
        versions = {"reason": self.reasoner.tag, **self.rewriter.tags}
        return [self._decide(item, r, d, s, versions) for item, r, d, s in zip(items, raw, dehinted, styled)]

    @staticmethod
    def _decide(item: Row, raw: str, dehinted: str, styled: str, versions: dict) -> Row:
        k = len(item["candidates"])
        parsed = parse_answer(styled, k)
        reasoning = extract_reasoning(styled)
        if parsed is None:
            reason = "unparsed"
        elif parsed.index != item["label"]:
            reason = "wrong_answer"
        elif HINT_TRACE.search(styled):
            reason = "hint_leak"
        elif "<think>" not in styled or not reasoning:
            reason = "bad_format"
        else:
            reason = None
        completion = None
        if reason is None:
            completion = f"<think>{reasoning}</think><answer>{option_letters(k)[item['label']]}</answer>"
        return {
            "id": item["id"],
            "kept": reason is None,
            "drop_reason": reason,
            "completion": completion,
            "split": item["meta"].get("split"),
            "flaws": [f for f in item["meta"].get("flaws", []) if f],
            "trace": {"reasoned": raw, "hint_removed": dehinted, "style_aligned": styled},
            "versions": versions,
        }


def summarize_distilled(rows: list[Row]) -> dict[str, Any]:
    """Kept fraction overall and per flaw type (an item counts for each flaw among its negatives)."""
    kept_by_flaw: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for row in rows:
        for flaw in set(row["flaws"]):
            kept_by_flaw[flaw][0] += row["kept"]
            kept_by_flaw[flaw][1] += 1
    n_kept = sum(row["kept"] for row in rows)
    return {
        "kept": n_kept,
        "kept_fraction": round(n_kept / len(rows), 4) if rows else None,
        "kept_fraction_per_flaw": {f: round(k / n, 4) for f, (k, n) in sorted(kept_by_flaw.items())},
        "drop_reasons": dict(Counter(row["drop_reason"] for row in rows if not row["kept"])),
    }

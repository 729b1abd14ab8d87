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

A thinking model's reply is read in whatever form its server gives it (`data_synthesis.thinking`): the
kept trace is the reasoner's own reasoning about the candidates, never the rewriter's thinking about the
rewrite and never a second `<think>` block nested inside the first; a reply cut at the token budget is
dropped as `truncated`.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from typing import Any, Protocol

from data_synthesis.negatives import PAPER_CATEGORIES
from data_synthesis.prompts import HINT_REMOVAL, REASON, STYLE_ALIGN, hint_sentence
from data_synthesis.sampling import generate_rows, sampling_for
from data_synthesis.thinking import Reply, read_reply, think_blocks
from judge.backends.base import Backend, ChatRequest, Generation, SamplingParams
from judge.parser import parse_answer
from judge.prompt import lettered_candidates, option_letters

__all__ = [
    "PAPER_CATEGORIES",
    "DescriptionReasoner",
    "Distiller",
    "ModelReasoner",
    "ModelRewriter",
    "Rewritten",
    "RuleRewriter",
    "SceneReasoner",
    "false_fact_share",
    "normalize_trace",
    "summarize_distilled",
]

Row = dict[str, Any]

HINT_TRACE = re.compile(r"\b(hint|annotator|preferred option|was told|reference answer)\b", re.IGNORECASE)
_HINT_SENTENCE = re.compile(
    r"[^.!?\n<>]*\b(hint|annotator|preferred option|was told|reference answer)\b[^.!?\n<>]*[.!?]?\s*", re.IGNORECASE
)
_TAG_SENTENCE = re.compile(r"[^.!?\n]*</?(?:think|answer)>[^.!?\n]*[.!?]?[ \t]*", re.IGNORECASE)
_ANY_TAG = re.compile(r"</?(?:think|answer)>", re.IGNORECASE)
_ONE_PAIR = re.compile(r"<think>(?:(?!</?think>|</?answer>).)+</think><answer>[A-Z]</answer>", re.DOTALL)
_STYLE_RULES = (
    (re.compile(r"\b[Tt]he (image )?description (says|states|mentions|shows|notes)\b"), "the image shows"),
    (re.compile(r"\b[Aa]ccording to the (image )?description\b"), "in the image"),
    (re.compile(r"\b[Tt]he (image )?description\b"), "the image"),
    (re.compile(r"\bis described as\b"), "appears as"),
    (re.compile(r"\bdescribed\b"), "shown"),
)


class Reasoner(Protocol):
    tag: str

    def __call__(self, items: list[Row]) -> list[str] | list[Generation]: ...


class Rewriter(Protocol):
    tags: dict[str, str | None]

    def __call__(self, texts: list[str], row_ids: list[Any] | None = None) -> list[Rewritten]:
        """Steps 3 and 4 for each `<think>…</think><answer>X</answer>` text (`row_ids` seed the requests)."""
        ...


class _WorldReasoner:
    """A reasoner of the synthetic world, writing traces in one of the registered styles (`world.REASONERS`)."""

    name = "world_reasoner"

    def __init__(self, style: str = "diff") -> None:
        from data_synthesis.world import reasoner_style

        reasoner_style(style)  # an unknown style fails here, naming the known ones
        self.style = style
        self.tag = f"{self.name}:{style}"


class SceneReasoner(_WorldReasoner):
    """The synthetic world's deterministic reasoner: checks every option against the scene (no hint needed).

    `style` is `world.scene_reasoner`'s, a name in the registry `world.REASONERS` (`world/styles.py` says
    what each writes): "diff" (natural sentences), "restate" (facts restated per option), "contrast" (the
    options compared with each other, then only the disputed slot checked), "pairs", "scene", "keyed", "checks".
    """

    name = "scene_reasoner"

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


class DescriptionReasoner(_WorldReasoner):
    """The synthetic world's stand-in for the text reasoning model: it reads the item's description, the
    question, the lettered options and the hint (the label), and never the scene.

    Its trace is `world.description_reasoner`'s: the scene as the description states it, checked against
    each option in `style`; where no option matches that reading, `hint` "lean" follows the hint and "ignore"
    answers the closest option (or nothing, where the asked object is missing). A misread description
    therefore gives a wrong answer (dropped) or a trace that reaches the label from misread facts (kept),
    as distillation from a real captioner does.
    """

    name = "description_reasoner"

    def __init__(self, style: str = "diff", hint: str = "lean") -> None:
        from data_synthesis.world import check_hint_use

        super().__init__(style)
        check_hint_use(hint)  # an unknown use fails here, naming the known ones
        self.hint = hint
        if hint != "lean":
            self.tag = f"{self.tag}:hint={hint}"

    def __call__(self, items: list[Row]) -> list[str]:
        from data_synthesis.world import description_reasoner

        out = []
        for item in items:
            description = item["meta"].get("description")
            if not description:
                raise ValueError(f"item {item['id']!r} has no description: run the describe stage first")
            out.append(
                description_reasoner(
                    description, item["question"], item["candidates"], item["label"], self.style, self.hint
                )
            )
        return out


class ModelReasoner:
    """A text reasoning model (any backend; text-only requests) judging from the description, with a hint.

    Returns the backend's replies as they came (a `Generation` each): the distiller reads the thinking out
    of them (`data_synthesis.thinking`), wherever the server put it.
    """

    tag = REASON.tag

    def __init__(
        self,
        backend: Backend,
        params: SamplingParams | None = None,
        *,
        max_new_tokens: int | None = None,
        temperature: float | None = None,
    ) -> None:
        params = params or sampling_for("reasoner")
        if max_new_tokens is not None:
            params = replace(params, max_new_tokens=max_new_tokens)
        if temperature is not None:
            params = replace(params, temperature=temperature)
        self.backend, self.params = backend, params

    def __call__(self, items: list[Row]) -> list[Generation]:
        requests = []
        for item in items:
            letter = option_letters(len(item["candidates"]))[item["label"]]
            text = REASON.format(
                description=item["meta"].get("description", ""),
                question=item["question"],
                options=lettered_candidates(item["candidates"]),
                hint=hint_sentence(letter),
            )
            requests.append(ChatRequest(messages=[{"role": "user", "content": text}]))
        return generate_rows(self.backend, requests, self.params, [item["id"] for item in items])


def strip_hint(text: str) -> str:
    """Drop every sentence that mentions the hint."""
    return _HINT_SENTENCE.sub("", text)


def strip_tag_talk(text: str) -> str:
    """Drop every sentence that names a format tag (a thinking model planning its `<think>` block).

    Such sentences talk about the prompt, not the image, and would nest a second tag pair in the trace.
    """
    return _TAG_SENTENCE.sub("", text).strip()


def align_style(text: str) -> str:
    """Speak as one who sees the image."""
    for pattern, replacement in _STYLE_RULES:
        text = pattern.sub(replacement, text)
    return text


@dataclass(frozen=True)
class Rewritten:
    """One trace after steps 3 and 4; `problem` says why there is nothing to keep (e.g. "truncated")."""

    dehinted: str
    styled: str
    problem: str | None = None
    tokens: int = 0


def normalize_trace(body: str, k: int) -> tuple[str | None, str | None]:
    """`<think>T</think><answer>X</answer>` from a model's answer text, or `(None, drop reason)`.

    T is the one think block in `body` (or, without one, the text before the answer tag), with sentences
    about the tags removed; X is the answer `body` gives. Two think blocks mean a nested second one.
    """
    blocks = think_blocks(body)
    if len(blocks) > 1:
        return None, "nested_think"
    parsed = parse_answer(body, k)
    if parsed is None:
        return None, "unparsed"
    trace = blocks[0] if blocks else body.split("<answer>", 1)[0].replace("<think>", "")
    return _wrap(trace, option_letters(k)[parsed.index])


def _wrap(trace: str, letter: str) -> tuple[str | None, str | None]:
    trace = strip_tag_talk(trace)
    if _ANY_TAG.search(trace):
        return None, "nested_think"
    if not trace:
        return None, "no_reasoning"
    return f"<think>{trace}</think><answer>{letter}</answer>", None


class RuleRewriter:
    """Steps 3 and 4 by fixed rules: drop hint sentences, rewrite description talk as image talk."""

    tags: dict[str, str | None] = {"hint_removal": "rules@v1", "style_align": "rules@v1"}

    def __call__(self, texts: list[str], row_ids: list[Any] | None = None) -> list[Rewritten]:
        out = []
        for text in texts:
            dehinted = strip_hint(text)
            out.append(Rewritten(dehinted, align_style(dehinted)))
        return out


class ModelRewriter:
    """Steps 3 and 4 by a text model (batched), each followed by the rules as a guard.

    The model may be the reasoning model itself: its thinking about *how to rewrite* is read apart and
    discarded; only the rewritten judgement it writes after thinking is used.
    """

    def __init__(
        self, backend: Backend, params: SamplingParams | None = None, *, max_new_tokens: int | None = None
    ) -> None:
        params = params or sampling_for("rewriter")
        if max_new_tokens is not None:
            params = replace(params, max_new_tokens=max_new_tokens)
        self.backend, self.params = backend, params
        self.tags = {"hint_removal": HINT_REMOVAL.tag, "style_align": STYLE_ALIGN.tag}

    def _rewrite(self, prompt: Any, texts: list[str], row_ids: list[Any], step: int) -> list[tuple[str, int, str]]:
        """(rewritten text or "", tokens, problem or "") per text."""
        requests = [ChatRequest(messages=[{"role": "user", "content": prompt.format(text=t)}]) for t in texts]
        out = []
        for reply in map(read_reply, generate_rows(self.backend, requests, self.params, row_ids, salt=step)):
            out.append(("", reply.tokens, "truncated") if reply.truncated else (reply.body, reply.tokens, ""))
        return out

    def __call__(self, texts: list[str], row_ids: list[Any] | None = None) -> list[Rewritten]:
        row_ids = list(row_ids) if row_ids is not None else list(range(len(texts)))
        results: list[Rewritten | None] = [None] * len(texts)
        first = self._rewrite(HINT_REMOVAL, texts, row_ids, 1)
        second_in: list[int] = []
        dehinted: dict[int, str] = {}
        for i, (body, tokens, problem) in enumerate(first):
            if problem:
                results[i] = Rewritten("", "", problem, tokens)
                continue
            dehinted[i] = strip_hint(body)
            second_in.append(i)
        second = self._rewrite(STYLE_ALIGN, [dehinted[i] for i in second_in], [row_ids[i] for i in second_in], 2)
        for i, (body, tokens, problem) in zip(second_in, second):
            spent = first[i][1] + tokens
            results[i] = Rewritten(dehinted[i], "" if problem else align_style(body), problem or None, spent)
        return results  # type: ignore[return-value]


class Distiller:
    """Steps 2–4 and the keep/drop decision for a batch of MC items (a `run_stage` process function).

    The trace kept is the reasoner's reasoning about the candidates: its native thinking when the server
    gives one (a reasoning field or a leading think block), else the think block it wrote as asked. Only
    traces whose answer is the label go on to the rewriter; whatever the rewriter thinks about rewriting
    is discarded. Every kept completion is exactly `<think>…</think><answer>X</answer>`.
    """

    def __init__(self, reasoner: Reasoner, rewriter: Rewriter) -> None:
        self.reasoner, self.rewriter = reasoner, rewriter

    def __call__(self, items: list[Row]) -> list[Row]:
        replies = [read_reply(r) for r in self.reasoner(items)]
        versions = {"reason": self.reasoner.tag, **self.rewriter.tags}
        firsts = [self._first_pass(item, reply) for item, reply in zip(items, replies)]
        todo = [i for i, (_, reason) in enumerate(firsts) if reason is None]  # only right answers are rewritten
        rewritten = self.rewriter([firsts[i][0] for i in todo], [items[i]["id"] for i in todo])  # type: ignore[misc]
        by_index = dict(zip(todo, rewritten))
        return [
            self._decide(item, reply, first, by_index.get(i), versions)
            for i, (item, reply, first) in enumerate(zip(items, replies, firsts))
        ]

    @staticmethod
    def _first_pass(item: Row, reply: Reply) -> tuple[str | None, str | None]:
        """The reasoner's trace in normal form, or why it is dropped before any rewriting."""
        k = len(item["candidates"])
        if reply.truncated:
            return None, "truncated"
        if reply.thinking is None:
            text, reason = normalize_trace(reply.body, k)
        else:
            parsed = parse_answer(reply.body, k)
            if parsed is None:
                return None, "unparsed"
            text, reason = _wrap(reply.thinking, option_letters(k)[parsed.index])
        if text is not None and parse_answer(text, k).index != item["label"]:  # type: ignore[union-attr]
            return text, "wrong_answer"
        return text, reason

    @staticmethod
    def _decide(
        item: Row, reply: Reply, first: tuple[str | None, str | None], rewrite: Rewritten | None, versions: dict
    ) -> Row:
        k = len(item["candidates"])
        reasoned, reason = first
        completion = None
        if reason is None and rewrite is not None:
            completion, reason = (None, rewrite.problem) if rewrite.problem else normalize_trace(rewrite.styled, k)
        if completion is not None:
            if parse_answer(completion, k).index != item["label"]:  # type: ignore[union-attr]
                completion, reason = None, "answer_changed"
            elif HINT_TRACE.search(completion):
                completion, reason = None, "hint_leak"
        if completion is not None and not _ONE_PAIR.fullmatch(completion):
            completion, reason = None, "bad_format"
        tokens = reply.tokens + (rewrite.tokens if rewrite else 0)
        return {
            "id": item["id"],
            "kept": completion is not None,
            "drop_reason": reason,
            "completion": completion,
            "split": item["meta"].get("split"),
            "flaws": [f for f in item["meta"].get("flaws", []) if f],
            "trace": {
                "reasoning": reply.thinking,
                "reply": reply.body,
                "reasoned": reasoned,
                "hint_removed": rewrite.dehinted if rewrite else None,
                "style_aligned": rewrite.styled if rewrite else None,
            },
            "versions": versions,
            "usage": {"completion_tokens": tokens},
        }


def _fractions(rows: list[Row], category: Any) -> dict[str, float]:
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for row in rows:
        for name in {category(f) for f in row["flaws"]}:
            counts[name][0] += row["kept"]
            counts[name][1] += 1
    return {name: round(k / n, 4) for name, (k, n) in sorted(counts.items())}


def summarize_distilled(rows: list[Row]) -> dict[str, Any]:
    """Kept fraction overall, per flaw type and per paper category (an item counts for each flaw it has)."""
    n_kept = sum(row["kept"] for row in rows)
    drops = Counter(row["drop_reason"] for row in rows if not row["kept"])
    return {
        "kept": n_kept,
        "kept_fraction": round(n_kept / len(rows), 4) if rows else None,
        "kept_fraction_per_flaw": _fractions(rows, lambda f: f),
        "kept_fraction_per_paper_category": _fractions(rows, lambda f: PAPER_CATEGORIES.get(f, f)),
        "paper_category_of_flaw": dict(PAPER_CATEGORIES),
        "drop_reasons": dict(sorted(drops.items())),
        "truncated": drops.get("truncated", 0),
        "completion_tokens": sum(row.get("usage", {}).get("completion_tokens", 0) for row in rows),
    }


def false_fact_share(items: list[Row], rows: list[Row], style: str) -> float | None:
    """The share of kept traces that state something the picture does not show: on the synthetic world, the
    kept traces that differ from the one the scene reasoner (exact by construction) writes for the same item
    and `style`, after the same rewriting. None when nothing was kept."""
    kept = {row["id"]: row["completion"] for row in rows if row["kept"]}
    todo = [item for item in items if item["id"] in kept]
    if not todo:
        return None
    exact = Distiller(SceneReasoner(style), RuleRewriter())(todo)
    return sum(row["completion"] != kept[row["id"]] for row in exact) / len(todo)


def distilled_tokens(row: Row) -> int:
    """Completion tokens a distilled row cost (for the progress bar's tokens/s)."""
    return int(row.get("usage", {}).get("completion_tokens", 0))

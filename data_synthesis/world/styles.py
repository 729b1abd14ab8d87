"""The scene reasoner's trace styles, as a registry: `REASONERS[name]` says how that style words the image
and judges each option (`ReasonerStyle`); `scene_reasoner` looks the style up and writes the trace.

Every style reaches the same decision (an exactly matching option, else the closest); they differ only in
how the trace lays the evidence out for a small model to learn:

- `diff`: each wrong option's first difference in words ("A: says blue, but it is red, no.");
- `restate`: the true facts, then every option's facts restated in the same order and form with yes or no
  ("Image: square top left red. A: square top left blue, no. B: square top left red, yes."), laid out so
  that a tiny model can compare token by token;
- `contrast`: the options compared with each other first, then only the disputed slot checked against the
  image ("A says square; B says triangle. Image: square. A is right."); `diff` when no option is exactly right;
- `pairs`: each option fact beside the image fact in the same slot ("A: triangle-square no; ...; so no.");
- `scene`: the whole picture first, worded as the describe stage words it ("Image: Shapes: a large red circle
  at the top left; …. Text: none."), then `diff` verdicts, so a judge that also learns to describe pictures
  writes the same description inside its reasoning;
- `keyed`: `diff` verdicts after an image line that puts every fact right after the kind it belongs to
  ("Image: square green, square small, square top right."), see `_keyed_phrase`;
- `checks`: the `keyed` image line, then each option checked fact by fact, each fact keyed by the shape it is
  about ("A: square against square yes; square top left against top right no; so no."), see `_checks`.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass

from data_synthesis.world.facts import _checked_facts, _facts, _restated, _span
from data_synthesis.world.questions import _relation
from data_synthesis.world.scene import Scene, Task
from data_synthesis.world.wording import _keyed_phrase, _seen, describe_scene

__all__ = ["REASONERS", "REASONER_STYLES", "Evidence", "ReasonerStyle", "reasoner_style"]


def _verdict(letter: str, truth: list[str], option: list[str]) -> str:
    """Name the first meaningful difference between an option and the true answer."""
    if [t.lower() for t in option] == [t.lower() for t in truth]:
        return f"{letter}: matches, yes."
    matcher = difflib.SequenceMatcher(None, [t.lower() for t in truth], [t.lower() for t in option], autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        old, new = _span(truth[i1:i2]), _span(option[j1:j2])
        if op == "replace" and old and new:
            return f"{letter}: says {new}, but it is {old}, no."
        if old and not new:
            return f"{letter}: leaves out {old}, no."
        if new and not old:
            return f"{letter}: adds {new}, which is wrong, no."
    return f"{letter}: worded differently, no."


def _pairs(letter: str, truth: list[str], option: list[str]) -> str:
    """Each of an option's facts beside the image's fact in the same slot, with a verdict per slot.

    "A: triangle-square no; bottom-bottom yes; red-red yes; so no." Every yes/no compares the two tokens
    just written, each copied from where the one before it was copied (the option text, the image line),
    so no step of the trace needs more than a copy and a local comparison.
    """
    facts, said = _facts(truth), _facts(option)
    parts = []
    matcher = difflib.SequenceMatcher(None, facts, said, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            parts += [f"{o}-{o} yes" for o in said[j1:j2]]
        else:
            seen, says = facts[i1:i2], said[j1:j2]
            width = max(len(seen), len(says))
            seen, says = seen + ["none"] * (width - len(seen)), says + ["none"] * (width - len(says))
            parts += [f"{o}-{t} no" for o, t in zip(says, seen)]
    return f"{letter}: {'; '.join(parts)}; so {'yes' if facts == said else 'no'}."


def _owners(scene: Scene, task: Task, facts: list[str]) -> list[str | None]:
    """The kind of the shape each of the true answer's facts is about (None for kinds, relations, counts).

    An attribute answer is about one shape; a spatial answer is about the first shape up to its relation
    and about the second after it. Count and text answers name no single shape per fact.
    """
    if task.kind == "attribute":
        kind = scene.shapes[task.params["shape"]].kind
        return [None if f == kind else kind for f in facts]
    if task.kind == "spatial":
        a, b = scene.shapes[task.params["a"]].kind, scene.shapes[task.params["b"]].kind
        relation = facts.index(_relation(scene, task))
        return [None if f in (a, b) or i == relation else (a if i < relation else b) for i, f in enumerate(facts)]
    return [None] * len(facts)


def _checks(letter: str, truth: list[str], owners: list[str | None], option: list[str]) -> str:
    """One check per fact: the option's fact against the image's, keyed by the shape it is about.

    "A: triangle against triangle yes; triangle bottom centre against bottom left no; triangle green against
    green yes; so no." The image's fact is copied from the `keyed` image line, where it follows the same
    kind ("triangle bottom left"), and each yes/no compares the two facts written just before it, so every
    step is a keyed copy or a local comparison. Facts the option adds or leaves out are checked against
    `none`. The separator is a word: after "-" a tokenizer splits "green" into pieces ("g", "reen") that
    are not the image line's token for it.
    """
    parts = []
    matcher = difflib.SequenceMatcher(None, truth, option, autojunk=False)
    for _, i1, i2, j1, j2 in matcher.get_opcodes():
        width = min(i2 - i1, j2 - j1)  # slot by slot, then what is left over as one span against none
        for i, said in zip(range(i1, i1 + width), option[j1 : j1 + width]):
            key = f"{owners[i]} " if owners[i] else ""
            parts.append(f"{key}{said} against {truth[i]} {'yes' if said == truth[i] else 'no'}")
        said, seen = " ".join(option[j1 + width : j2]) or "none", " ".join(truth[i1 + width : i2]) or "none"
        if said != seen:
            key = next((f"{o} " for o in owners[i1 + width : i2] if o), "")
            parts.append(f"{key}{said} against {seen} no")
    return f"{letter}: {'; '.join(parts)}; so {'yes' if truth == option else 'no'}."


def _contrast(letters: list[str], truth: list[str], tokens: list[list[str]], best: int) -> str:
    """Compare the options with each other first (text only), then check only what they disagree on.

    "A says triangle; B says square. Image: square. B is right." — the image is consulted for one slot,
    the one the options dispute, instead of for a whole description compared option by option.
    """
    low = [t.lower() for t in tokens[best]]
    said, extra = [], []
    for i, option in enumerate(tokens):
        if i == best:
            continue
        matcher = difflib.SequenceMatcher(None, low, [t.lower() for t in option], autojunk=False)
        for op, i1, i2, j1, j2 in matcher.get_opcodes():
            right, wrong = _span(tokens[best][i1:i2]), _span(option[j1:j2])
            if op == "replace" and right and wrong:
                said.append((letters[i], wrong, right))
                break
            if right and not wrong:
                extra.append(f"{letters[i]} leaves out {right}, so it is incomplete.")
                break
            if wrong and not right:
                extra.append(f"{letters[i]} adds {wrong}, which is wrong.")
                break
    parts = []
    if said:
        claims = sorted([(letters[best], said[0][2])] + [(letter, w) for letter, w, _ in said])
        parts.append("; ".join(f"{letter} says {w}" for letter, w in claims) + f". Image: {said[0][2]}.")
    parts.extend(extra)
    parts.append(f"{letters[best]} is right.")
    return " ".join(parts)


@dataclass(frozen=True)
class Evidence:
    """What every style writes its trace from."""

    scene: Scene
    task: Task
    letters: list[str]
    """The option letters, in display order."""
    truth: list[str]
    """The true answer's tokens (`facts._TOKEN`)."""
    tokens: list[list[str]]
    """Each option's tokens."""


# -- the image line of each style: what the picture shows -------------------------------------------------


def _seen_line(e: Evidence) -> str:
    return _seen(e.scene, e.task)


def _restated_line(e: Evidence) -> str:
    return _restated(e.truth)


def _facts_line(e: Evidence) -> str:
    return " ".join(_facts(e.truth))


def _scene_line(e: Evidence) -> str:
    return describe_scene(e.scene).split(" image. ", 1)[1].rstrip(".")  # the whole picture, as describe words it


def _keyed_line(e: Evidence) -> str:
    return _seen(e.scene, e.task, _keyed_phrase)


# -- the verdicts of each style: one line per option ------------------------------------------------------


def _diff_verdicts(e: Evidence) -> list[str]:
    return [_verdict(letter, e.truth, t) for letter, t in zip(e.letters, e.tokens)]


def _restate_verdicts(e: Evidence) -> list[str]:
    facts = _restated(e.truth)
    return [
        f"{letter}: {_restated(t)}, {'yes' if _restated(t) == facts else 'no'}."
        for letter, t in zip(e.letters, e.tokens)
    ]


def _pairs_verdicts(e: Evidence) -> list[str]:
    return [_pairs(letter, e.truth, t) for letter, t in zip(e.letters, e.tokens)]


def _checks_verdicts(e: Evidence) -> list[str]:
    facts = _checked_facts(e.truth)
    owners = _owners(e.scene, e.task, facts)
    return [_checks(letter, facts, owners, _checked_facts(t)) for letter, t in zip(e.letters, e.tokens)]


def _contrast_decided(e: Evidence, best: int) -> str:
    return _contrast(e.letters, e.truth, e.tokens, best)


# -- the registry ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReasonerStyle:
    """One trace layout: `<think>Image: {image}. {verdicts}</think><answer>X</answer>`."""

    image: Callable[[Evidence], str]
    """The image line."""
    verdicts: Callable[[Evidence], list[str]]
    """One verdict per option."""
    decided: Callable[[Evidence, int], str] | None = None
    """The whole `<think>` text when the option at the given index is exactly right, instead of the image
    line and verdicts (`contrast`); `None` to always write those."""


REASONERS: dict[str, ReasonerStyle] = {
    "diff": ReasonerStyle(_seen_line, _diff_verdicts),
    "restate": ReasonerStyle(_restated_line, _restate_verdicts),
    "contrast": ReasonerStyle(_seen_line, _diff_verdicts, decided=_contrast_decided),
    "pairs": ReasonerStyle(_facts_line, _pairs_verdicts),
    "scene": ReasonerStyle(_scene_line, _diff_verdicts),
    "keyed": ReasonerStyle(_keyed_line, _diff_verdicts),
    "checks": ReasonerStyle(_keyed_line, _checks_verdicts),
}
"""Every trace style by name (see the module docstring for what each writes)."""

REASONER_STYLES = tuple(REASONERS)
"""The style names, for CLI choices and config checks."""


def reasoner_style(name: str) -> ReasonerStyle:
    """The style registered as `name`; an unknown name is a `ValueError` listing the known ones.

    >>> reasoner_style("diff") is REASONERS["diff"]
    True
    """
    if name not in REASONERS:
        raise ValueError(
            f"style must be one of {REASONER_STYLES}, got {name!r} — pick one of those (see data_synthesis.world.styles)"
        )
    return REASONERS[name]

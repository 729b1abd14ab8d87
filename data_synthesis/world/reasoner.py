"""The scene reasoner (a judge trace computed from the scene, in one of the registered styles) and the
description reasoner (the same, from what a description says of the scene, with a hint)."""

from __future__ import annotations

import difflib

from data_synthesis.world.facts import _TOKEN
from data_synthesis.world.questions import _answer
from data_synthesis.world.reading import read_description, read_question
from data_synthesis.world.scene import SHAPE_KINDS, Scene, Task
from data_synthesis.world.styles import Evidence, reasoner_style
from judge.prompt import option_letters


def scene_reasoner(scene: Scene, task: Task, question: str, options: list[str], style: str = "diff") -> str:
    """A judge trace computed from the scene: what the image shows, then one verdict per option.

    Each option is compared, word by word, with the answer the scene implies (`question` is implied by
    `task` and only kept for the reasoner signature). An exact match (ignoring case and spacing) wins;
    if none matches, the closest option by `difflib` ratio wins, the earliest on ties (with a closing
    "None is right; X is closest."). `style` names a layout in `data_synthesis.world.styles.REASONERS`
    (diff, restate, contrast, pairs, scene, keyed, checks); all of them reach the same decision.
    """
    layout = reasoner_style(style)
    truth = _TOKEN.findall(_answer(scene, task))
    letters = option_letters(len(options))
    tokens = [_TOKEN.findall(o) for o in options]
    low = [x.lower() for x in truth]
    exact = [i for i, t in enumerate(tokens) if [x.lower() for x in t] == low]
    evidence = Evidence(scene, task, letters, truth, tokens)
    if exact and layout.decided is not None:
        return f"<think>{layout.decided(evidence, exact[0])}</think><answer>{letters[exact[0]]}</answer>"
    lines = layout.verdicts(evidence)
    if exact:
        best = exact[0]
    else:
        ratios = [difflib.SequenceMatcher(None, low, [x.lower() for x in t], autojunk=False).ratio() for t in tokens]
        best = ratios.index(max(ratios))
        lines.append(f"None is right; {letters[best]} is closest.")
    return f"<think>Image: {layout.image(evidence)}. {' '.join(lines)}</think><answer>{letters[best]}</answer>"


HINT_USES = ("lean", "ignore")
"""How the description reasoner uses the hint where its reading settles nothing: follow it, or not at all."""


def check_hint_use(hint: str) -> None:
    """`hint` is one of `HINT_USES`; the error names them (the setting is `reasoner_hint` wherever it is set)."""
    if hint not in HINT_USES:
        raise ValueError(f"reasoner_hint must be one of {list(HINT_USES)}, got {hint!r}")


def description_reasoner(
    description: str, question: str, options: list[str], hinted: int, style: str = "diff", hint: str = "lean"
) -> str:
    """A judge trace from the description alone, as a text reasoning model with a hint writes one.

    The scene is read from `description` (`read_description`), so a misread fact there is a misread fact
    here. The reasoner trusts its reading where an option matches it exactly, even against the hint (the
    distiller then drops the trace: its answer is not the label). Where no option matches, or the
    description lacks what the question asks about, `hint` says what it does:

    - "lean": it leans on the hint (`hinted`, the label's index) and says so; hint removal takes that sentence
      out, and what is left is a trace that reached the label from a misreading, as a real distilled trace can;
    - "ignore": it trusts its reading to the end. It answers the option closest to its reading, and where the
      asked object is missing it says it cannot tell and gives no answer (the filter drops both unless the
      closest option is the label), as a reasoning model that will not rationalise towards a hint does.
    """
    check_hint_use(hint)
    scene = read_description(description)
    task = read_question(scene, question)
    letters = option_letters(len(options))
    lean = f"The hint points to {letters[hinted]}."
    if task is None:
        if hint == "ignore":
            return f"<think>Image: {_missing(question)}. I cannot tell which option is right.</think>"
        return f"<think>Image: {_missing(question)}. {lean}</think><answer>{letters[hinted]}</answer>"
    trace = scene_reasoner(scene, task, question, options, style=style)
    truth = [x.lower() for x in _TOKEN.findall(_answer(scene, task))]
    if (
        hint == "ignore"
        or any([x.lower() for x in _TOKEN.findall(o)] == truth for o in options)
        or trace.endswith(f"<answer>{letters[hinted]}</answer>")
    ):
        return trace
    body = trace[len("<think>") : trace.index("</think>")]
    body = body[: body.rindex("None is right;")] + f"None is right. {lean}"
    return f"<think>{body}</think><answer>{letters[hinted]}</answer>"


def _missing(question: str) -> str:
    """What a reader whose description lacks the asked object says it sees."""
    kinds = [w.strip("?") for w in question.split() if w.strip("?") in SHAPE_KINDS]
    return f"no {' and no '.join(kinds)} to be seen" if kinds else "nothing of what is asked"

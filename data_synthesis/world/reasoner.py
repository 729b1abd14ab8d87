"""The scene reasoner: a judge trace computed from the scene, in one of the registered styles."""

from __future__ import annotations

import difflib

from data_synthesis.world.facts import _TOKEN
from data_synthesis.world.questions import _answer
from data_synthesis.world.scene import Scene, Task
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

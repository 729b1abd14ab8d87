"""MM-Vet's grader, as the official evaluator (yuweihao/MM-Vet `mm-vet_evaluator.py`) runs it: the
few-shot prompt byte for byte, `max_tokens` 3, and the retry rule for an unparsable grade."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from eval.mmvet.data import MMVetQuestion
from judge.backends.base import Backend, ChatRequest, SamplingParams

GRADER_PROMPT = """Compare the ground truth and prediction from AI models, to give a correctness score for the prediction. <AND> in the ground truth means it is totally right only when all elements in the ground truth are present in the prediction, and <OR> means it is totally right when any one element in the ground truth is present in the prediction. The correctness score is 0.0 (totally wrong), 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, or 1.0 (totally right). Just complete the last space of the correctness score.

Question | Ground truth | Prediction | Correctness
--- | --- | --- | ---
What is x in the equation? | -1 <AND> -5 | x = 3 | 0.0
What is x in the equation? | -1 <AND> -5 | x = -1 | 0.5
What is x in the equation? | -1 <AND> -5 | x = -5 | 0.5
What is x in the equation? | -1 <AND> -5 | x = -5 or 5 | 0.5
What is x in the equation? | -1 <AND> -5 | x = -1 or x = -5 | 1.0
Can you explain this meme? | This meme is poking fun at the fact that the names of the countries Iceland and Greenland are misleading. Despite its name, Iceland is known for its beautiful green landscapes, while Greenland is mostly covered in ice and snow. The meme is saying that the person has trust issues because the names of these countries do not accurately represent their landscapes. | The meme talks about Iceland and Greenland. It's pointing out that despite their names, Iceland is not very icy and Greenland isn't very green. | 0.4
Can you explain this meme? | This meme is poking fun at the fact that the names of the countries Iceland and Greenland are misleading. Despite its name, Iceland is known for its beautiful green landscapes, while Greenland is mostly covered in ice and snow. The meme is saying that the person has trust issues because the names of these countries do not accurately represent their landscapes. | The meme is using humor to point out the misleading nature of Iceland's and Greenland's names. Iceland, despite its name, has lush green landscapes while Greenland is mostly covered in ice and snow. The text 'This is why I have trust issues' is a playful way to suggest that these contradictions can lead to distrust or confusion. The humor in this meme is derived from the unexpected contrast between the names of the countries and their actual physical characteristics. | 1.0
"""
"""The official MM-Vet grader prompt (yuweihao/MM-Vet `mm-vet_evaluator.py`), byte for byte."""

RETRY_SUFFIX = "\nPredict the correctness of the answer (digit): "
"""Appended to the grading message when a grade could not be parsed (official retry rule)."""

GRADER_TEMPERATURES = (0.0, 0.0, 0.5, 1.0, 1.5)
"""Temperature of each try: the plain call, then four retries starting at 0.0 and rising by 0.5."""

GRADER_MAX_TOKENS = 3
"""The official grader reads at most three tokens: a grade such as `0.7`."""


def grader_message(question: str, answer: str, prediction: str, retry: bool = False) -> str:
    """The grader's user message, exactly as the official evaluator builds it.

    >>> grader_message("What is x?", "-1<AND>-5", "x = -1").splitlines()[-1]
    'What is x? | -1 <AND> -5 | x = -1 | '
    >>> grader_message("Q?", "a", "b", retry=True).endswith("Q? | a | b | " + RETRY_SUFFIX)
    True
    """
    spaced = answer.replace("<AND>", " <AND> ").replace("<OR>", " <OR> ")
    message = GRADER_PROMPT + "\n" + " | ".join([question, spaced, prediction, ""])
    return message + RETRY_SUFFIX if retry else message


def parse_grade(text: str) -> float | None:
    """The grade in a grader reply (official rule: the text before the first space), or `None`.

    >>> [parse_grade(t) for t in ("0.7", "1.0 ", "0.5.", "1.2", "abc", "")]
    [0.7, 1.0, None, None, None, None]
    """
    try:
        score = float(text.split(" ")[0].strip())
    except ValueError:
        return None
    # `not 0 <= score <= 1` also rejects NaN, which the official range check would let through.
    return score if 0.0 <= score <= 1.0 else None


@dataclass
class Grade:
    """The grader's verdict on one prediction, with what it took to get it."""

    score: float
    """In [0, 1]; 0.0 when every try was unparsable."""
    tries: int = 1
    """Grader calls whose answer was read: 1 when the first parsed, at most `len(GRADER_TEMPERATURES)`."""
    raw: list[str] = field(default_factory=list)
    """The grader's reply to each try."""
    failed: bool = False
    """True when no try parsed and the score fell back to 0.0."""


def _text_request(text: str) -> ChatRequest:
    # A plain string as content, as the official evaluator sends it (no parts list, no image).
    return ChatRequest(messages=[{"role": "user", "content": text}])


def grade_predictions(backend: Backend, pairs: Sequence[tuple[MMVetQuestion, str]]) -> list[Grade]:
    """Grade each (question, prediction) pair with the official prompt and retry rule.

    Each round is one `backend.generate` call: all pairs first, then every still-unparsed pair with
    `RETRY_SUFFIX` at the next temperature of `GRADER_TEMPERATURES`.
    """
    messages = [grader_message(q.question, q.answer, prediction) for q, prediction in pairs]
    raws: list[list[str]] = [[] for _ in pairs]
    scores: list[float | None] = [None] * len(pairs)
    pending = list(range(len(pairs)))
    for attempt, temperature in enumerate(GRADER_TEMPERATURES):
        if not pending:
            break
        suffix = RETRY_SUFFIX if attempt else ""
        requests = [_text_request(messages[i] + suffix) for i in pending]
        generations = backend.generate(requests, SamplingParams(GRADER_MAX_TOKENS, temperature))
        if len(generations) != len(requests):
            raise RuntimeError(
                f"grader backend {backend.name} returned {len(generations)} results for {len(requests)} requests"
            )
        still = []
        for i, generation in zip(pending, generations):
            raws[i].append(generation.text)
            scores[i] = parse_grade(generation.text)
            if scores[i] is None:
                still.append(i)
        pending = still
    return [
        Grade(score=0.0 if s is None else s, tries=len(raw), raw=raw, failed=s is None) for s, raw in zip(scores, raws)
    ]

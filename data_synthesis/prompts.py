"""Every prompt the data engine sends to a model, each with a version recorded in every output row.

Change a prompt's text → bump its version, so rows made with different wording can be told apart.
The judge's own MC prompt, and the lettered candidate block both share, live in `judge.prompt`; these are
the synthesis-side prompts.
"""

from __future__ import annotations

from dataclasses import dataclass

from data_synthesis.records import FLAWS

__all__ = [
    "DESCRIBE",
    "HINT_REMOVAL",
    "NEGATIVES",
    "REASON",
    "STYLE_ALIGN",
    "VersionedPrompt",
    "hint_sentence",
]


@dataclass(frozen=True)
class VersionedPrompt:
    name: str
    version: str
    template: str

    @property
    def tag(self) -> str:
        """`name@version`, the string stored in output rows."""
        return f"{self.name}@{self.version}"

    def format(self, **values: str) -> str:
        return self.template.format(**values)


NEGATIVES = VersionedPrompt(
    "negatives",
    "v1",
    "You write wrong answers for training a judge. Look at the image, the question and the correct answer, then "
    "write {n} different answers that sound plausible and follow the correct answer's style but are wrong in one "
    "specific way each. Use these flaw types: " + ", ".join(FLAWS) + ".\n\n"
    "Question: {question}\nCorrect answer: {answer}\n\n"
    'Reply with only a JSON list like [{{"answer": "...", "flaw": "hallucinated_attribute"}}, ...].',
)
"""Reverse response-candidate synthesis: the correct answer is given, flawed variants are asked for."""

DESCRIBE = VersionedPrompt(
    "describe",
    "v1",
    "Describe this image in detail for someone who cannot see it: every object with its colour, size and "
    "position, any text exactly as written, and how the objects are arranged. Do not guess beyond the image.",
)
"""Step 1 of distillation: turn the image into text a text-only reasoning model can use."""

REASON = VersionedPrompt(
    "reason",
    "v1",
    "An image is described below. Judge which candidate answers the question best, by harmlessness, then "
    "accuracy, then detail. Check every candidate against the description.\n\n"
    "Image description: {description}\n\nQuestion: {question}\n\nCandidates:\n{options}\n\n{hint}\n\n"
    "Write your reasoning inside <think> and </think>, then the letter of the best candidate as <answer>X</answer>.",
)
"""Step 2: a text reasoning model judges from the description, nudged by a subtle hint of the right option."""

HINT_REMOVAL = VersionedPrompt(
    "hint_removal",
    "v1",
    "Rewrite the judgement below so that it never mentions a hint, a reference answer or being told which "
    "option is right; keep every step of the reasoning and the final <answer> tag unchanged.\n\n{text}",
)
"""Step 3: the judge must look as if it found the answer itself."""

STYLE_ALIGN = VersionedPrompt(
    "style_align",
    "v1",
    "Rewrite the judgement below as if you were looking at the image yourself: say 'the image shows' instead of "
    "'the description says', and change nothing else, keeping the <think> and <answer> tags.\n\n{text}",
)
"""Step 4: a judge sees the image, not a description of it."""


def hint_sentence(letter: str) -> str:
    """The subtle hint of the right option (removed again in step 3)."""
    return f"Hint: a careful annotator preferred option {letter}; verify this yourself."

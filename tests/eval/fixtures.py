"""Shared by the eval tests: the benchmark files (from `tiny_world.bench_files`), a scripted judge, and what the
MM-Vet files score under the stand-in grader (`tiny_world.servers.grader_server`), worked out by hand."""

from __future__ import annotations

from tiny_world.bench_files import (
    MMVET,
    MMVET_CANDIDATES,
    MMVET_JUNK,
    VLRB_IDS,
    png_bytes,
    write_mmrb,
    write_mmvet,
    write_mmvet_candidates,
    write_vlrb_jsonl,
    write_vlrb_parquet,
)

__all__ = [
    "FIRST",
    "MMVET",
    "MMVET_CANDIDATES",
    "MMVET_GRADES",
    "MMVET_JUNK",
    "ORACLE",
    "VLRB_IDS",
    "ScriptedJudge",
    "png_bytes",
    "write_mmrb",
    "write_mmvet",
    "write_mmvet_candidates",
    "write_vlrb_jsonl",
    "write_vlrb_parquet",
]

# The stand-in grader's grade of each MM-Vet candidate (MMVET_CANDIDATES[j][id] -> MMVET_GRADES[id][j]), and
# the best-of-3 metrics they give when the judge always picks the first candidate, or the best one.
MMVET_GRADES = {"v1_0": [0.0, 1.0, 0.0], "v1_1": [1.0, 1.0, 0.0], "v1_2": [0.0, 1.0, 1.0], "v1_3": [1.0, 0.0, 0.0]}
FIRST = {"first_total": 0.5, "first_rec": 2 / 3, "first_ocr": 0.0, "first_math": 0.0, "first_know": 1.0}
ORACLE = {f"oracle_{k}": 1.0 for k in ("total", "rec", "ocr", "math", "know")}


class ScriptedJudge:
    """A `Backend` standing in for a judge model that always prefers the response saying 'correct'.

    It reads the prompt it is sent, so it checks that display orders are built and mapped back right;
    `reply` formats its verdict from the 1-based display position (None: an unparsable reply).
    """

    name = "scripted"

    def __init__(self, reply, wrong_every: int = 0) -> None:
        self.reply = reply
        self.wrong_every = wrong_every
        self.calls = 0

    def generate(self, requests, params):
        from judge.backends.base import Generation

        out = []
        for request in requests:
            self.calls += 1
            text = next(p["text"] for p in request.messages[-1]["content"] if p["type"] == "text")
            first, second = _shown_answers(text)
            position = 1 if "correct" in first else 2
            if self.wrong_every and self.calls % self.wrong_every == 0:
                position = 3 - position
            out.append(Generation(text=self.reply(position)))
        return out


def _shown_answers(text: str) -> tuple[str, str]:
    if "Answer 1:" in text:
        first = text.split("Answer 1:")[1].split("Answer 2:")[0]
        second = text.split("Answer 2:")[1]
        return first, second
    first = text.split("[The Start of Assistant A's Answer]")[1].split("[The End")[0]
    second = text.split("[The Start of Assistant B's Answer]")[1].split("[The End")[0]
    return first, second

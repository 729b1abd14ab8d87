"""Runs for the viewer's tests, made by the toolkit's own code: a VL-RewardBench file judged through
`run_pairwise_benchmark`, MC items through `judge_file`, a best-of-N run through `run_mmvet` and its stand-in
grader, an audit through `RewardAudit`. The judge is a backend that reads the options it was shown, so
the display orders the page draws again can be checked against what each call really saw."""

from __future__ import annotations

import json
import re
from pathlib import Path

from PIL import Image

from tiny_world.bench_files import VLRB_IDS

OPTION = re.compile(r"^([A-Z])\. (.*)$", re.MULTILINE)


class ReadsOptions:
    """A judge backend: picks the option that says 'correct' and writes what it saw in its reasoning.

    Questions naming a marker change that: `WRONG` picks another option, `FLIP` always answers A (so the two
    orders disagree), `MUTE` writes no answer.
    """

    name = "reads-options"

    def generate(self, requests, params):
        from judge.backends.base import Generation

        out = []
        for request in requests:
            text = next(p["text"] for p in request.messages[-1]["content"] if p["type"] == "text")
            options = OPTION.findall(text.split("Candidates:")[1])
            right = next((letter for letter, said in options if said.startswith("correct")), "A")
            other = next(letter for letter, _ in options if letter != right)
            chosen = other if "WRONG" in text else "A" if "FLIP" in text else right
            think = "shown " + "; ".join(f"{letter}={said}" for letter, said in options)
            out.append(
                Generation(text=f"<think>{think}</think>" + ("" if "MUTE" in text else f"<answer>{chosen}</answer>"))
            )
        return out


def shown_texts(text: str) -> list[str]:
    """The candidates a call saw, in the order it saw them, read back from `ReadsOptions`' reasoning."""
    think = text.split("<think>", 1)[-1].split("</think>", 1)[0]
    return [part.split("=", 1)[1] for part in think.removeprefix("shown ").split("; ")]


def shown_order(think: str, candidates: list[str]) -> list[int]:
    """The original indices a call saw."""
    return [candidates.index(text) for text in shown_texts(think)]


def write_vlrb(folder: Path, markers: dict[int, str] | None = None, *, size: int = 48) -> Path:
    """`folder/vlrb.jsonl`: eight VL-RewardBench rows with a flaw column, images under `folder/images/`;
    `markers` puts a `ReadsOptions` marker into item i's question."""
    markers = markers or {}
    (folder / "images").mkdir(parents=True, exist_ok=True)
    rows = []
    for i, (item_id, preferred) in enumerate(VLRB_IDS[:8]):
        responses = [f"wrong answer about picture {i}", f"wrong answer about picture {i}, again"]
        responses[preferred] = f"correct answer about picture {i}"
        Image.new("RGB", (size, size), (30 * i, 90, 160)).save(folder / f"images/{i}.png")
        rows.append(
            {
                "id": item_id,
                "query": f"What is in picture {i}? {markers.get(i, '')}".strip(),
                "response": responses,
                "image": f"images/{i}.png",
                "human_ranking": [0, 1] if preferred == 0 else [1, 0],
                "flaw": ["hallucinated_object", "incomplete"][i % 2],
            }
        )
    path = folder / "vlrb.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def judge_spec(seed: int = 3, orders: int = 2):
    from eval.workers import JudgeSpec
    from judge.backends.spec import ModelSpec
    from judge.judging import JudgeConfig

    spec = ModelSpec("reads-options")
    spec._built = ReadsOptions()  # the backend, already built: no model to load
    return JudgeSpec(spec, JudgeConfig(orders=orders, seed=seed))


def pairwise_run(data: Path, out: Path, *, seed: int = 3) -> Path:
    """Judge the VL-RewardBench file into the run folder `out`, as `mrjudge eval vl-rewardbench` does."""
    from eval import vl_rewardbench as vlrb
    from eval.run import Scoring, run_pairwise_benchmark

    items = vlrb.load_vl_rewardbench(data)
    run_pairwise_benchmark(
        vlrb, items, out=out, scoring=Scoring(seed=0), judge=judge_spec(seed), judge_name="reads", show_progress=False
    )
    return out


def audit_file(folder: Path) -> Path:
    """`folder/audit.jsonl` from a real `RewardAudit` over two steps of pairwise rewards graded by the answer key:
    the wrong answer is paid 0.8 (overpaid), the right one 0.1 at step 0 (underpaid) and 0.4 at step 1."""
    from judge.reward.audit import AuditConfig, AuditedGroup, RewardAudit

    path = folder / "audit.jsonl"
    Image.new("RGB", (40, 30), (200, 40, 40)).save(folder / "q.png")
    audit = RewardAudit(AuditConfig(auditor="answer_key", audit_rate=1.0, window=1, path=str(path)))
    for step in range(2):
        groups = [
            AuditedGroup(f"Q{i}", ["wrong", "right"], [0.8, 0.1 + 0.3 * step], "right", ["q.png"], pairwise=True)
            for i in range(3)
        ]
        audit.submit(groups, step)
    audit.close()
    return path

"""The policy's data from the world: split questions with their negatives, warm-start conversations, prompts."""

from __future__ import annotations

import json

from tiny_world.policy_data import rebase_images, world_questions, write_policy_data


def _world(tmp_path):
    items = [{"id": f"w{i}", "meta": {"split": "val" if i % 4 == 0 else "train"}} for i in range(12)]
    (tmp_path / "items.jsonl").write_text("".join(json.dumps(i) + "\n" for i in items))
    rows = [
        {"id": f"w{i}", "image": f"images/w{i}.png", "question": "q?", "answer": f"a{i}", "source": "world/count",
         "negatives": [{"text": f"n{i}", "flaw": "hallucinated_count"}] if i != 5 else []}
        for i in range(12)
    ]  # fmt: skip
    (tmp_path / "negatives.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_questions_split_and_policy_files(tmp_path):
    _world(tmp_path)
    val = world_questions(tmp_path, tmp_path, "val")
    train = world_questions(tmp_path, tmp_path, "train")
    assert [r["id"] for r in val] == ["w0", "w4", "w8"] and val[0]["negatives"] == ["n0"] and val[0]["kind"] == "count"
    assert len(train) == 8  # w5 has no negative
    data = tmp_path / "policy" / "data"
    rebased = rebase_images(train, tmp_path, data)
    assert rebased[0]["image"] == "../../images/w1.png"
    files = write_policy_data(rebased, data, correct_share=0.5, seed=0)
    sft = [json.loads(line) for line in files["sft"].read_text().splitlines()]
    answers = [row["messages"][1]["content"] for row in sft]
    assert all(a in (r["answer"], r["negatives"][0]) for a, r in zip(answers, rebased))
    assert 0 < sum(a.startswith("a") for a in answers) < len(answers)  # both right and wrong answers
    assert files["sft"].read_text() == write_policy_data(rebased, data, correct_share=0.5, seed=0)["sft"].read_text()
    prompts = [json.loads(line) for line in files["prompts"].read_text().splitlines()]
    assert set(prompts[0]) == {"id", "image", "question", "answer"}
    always = write_policy_data(rebased, data, correct_share=0.0, seed=0, wrong_answer=lambda row, rng: "x")
    assert {json.loads(line)["messages"][1]["content"] for line in always["sft"].read_text().splitlines()} == {"x"}

"""Assembly: 2-4 options, the reference among them, letters balanced, splits without leakage."""

from __future__ import annotations

from collections import Counter

import pytest

from data_synthesis.assemble import AssembleConfig, assemble_items, split_of, to_sft_example
from data_synthesis.records import group_of
from judge.prompt import build_messages, option_letters


def _rows(n: int, negatives: int = 3, turns: int = 1):
    return [
        {
            "id": f"conv-{i}#t{t}" if turns > 1 else f"rec-{i}",
            "image": f"images/{i}.png",
            "question": f"question {i}.{t}",
            "answer": f"right {i}.{t}",
            "source": "test",
            "negatives": [{"text": f"wrong {i}.{t}.{j}", "flaw": "incomplete"} for j in range(negatives)],
        }
        for i in range(n)
        for t in range(turns)
    ]


def test_items_hold_the_reference_at_the_label():
    items, summary = assemble_items(_rows(300), AssembleConfig(seed=1))
    assert len(items) == 300 == summary["items"]
    for item in items:
        assert 2 <= len(item["candidates"]) <= 4
        assert item["candidates"][item["label"]].startswith("right")
        assert item["meta"]["flaws"][item["label"]] is None
        assert all(f == "incomplete" for i, f in enumerate(item["meta"]["flaws"]) if i != item["label"])
    assert set(summary["options_histogram"]) == {"2", "3", "4"}


def test_letters_are_balanced_within_each_split_and_size():
    items, summary = assemble_items(_rows(600), AssembleConfig(val_fraction=0.2))
    groups = Counter((i["meta"]["split"], len(i["candidates"]), i["label"]) for i in items)
    for split in ("train", "val"):
        for k in (2, 3, 4):
            counts = [groups[(split, k, label)] for label in range(k)]
            assert max(counts) - min(counts) <= 1, (split, k, counts)
    assert set(summary["letter_histogram"]) == {"train", "val"}
    train = summary["letter_histogram"]["train"]
    assert sum(n for by_letter in train.values() for n in by_letter.values()) == summary["splits"]["train"]
    assert set(train["k=3"]) == {"A", "B", "C"}


def test_split_by_group_never_leaks():
    items, summary = assemble_items(_rows(200, turns=3), AssembleConfig(val_fraction=0.25))
    by_group: dict[str, set[str]] = {}
    for item in items:
        by_group.setdefault(group_of(item["id"]), set()).add(item["meta"]["split"])
    assert all(len(splits) == 1 for splits in by_group.values())
    assert 0.15 < summary["splits"]["val"] / len(items) < 0.35
    assert split_of("conv-3#t0", AssembleConfig()) == split_of("conv-3#t2", AssembleConfig())


def test_rows_without_enough_negatives_are_skipped_and_counted():
    rows = _rows(5, negatives=0) + _rows(5, negatives=1)
    items, summary = assemble_items(rows, AssembleConfig())
    assert len(items) == 5 and summary["skipped"] == {"too_few_negatives": 5}
    assert all(len(i["candidates"]) == 2 for i in items)


def test_same_seed_same_items_whatever_the_input_order():
    rows = _rows(50)
    a, _ = assemble_items(rows, AssembleConfig(seed=4))
    b, _ = assemble_items(list(reversed(rows)), AssembleConfig(seed=4))
    assert sorted(a, key=lambda i: i["id"]) == sorted(b, key=lambda i: i["id"])


def test_sft_example_uses_the_judges_own_prompt():
    item = assemble_items(_rows(1), AssembleConfig())[0][0]
    letter = option_letters(len(item["candidates"]))[item["label"]]
    example = to_sft_example(item, f"<think>ok</think><answer>{letter}</answer>")
    assert example["images"] == [item["image"]]
    assert example["messages"][:-1] == build_messages(item["question"], item["candidates"])
    assert example["messages"][-1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": f"<think>ok</think><answer>{letter}</answer>"}],
    }


@pytest.mark.parametrize("kwargs", [dict(min_options=1), dict(min_options=4, max_options=3), dict(val_fraction=1.0)])
def test_config_errors(kwargs):
    with pytest.raises(ValueError):
        AssembleConfig(**kwargs)

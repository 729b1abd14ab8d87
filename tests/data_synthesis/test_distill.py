"""Distillation: hint in, hint out, style aligned, only correct traces kept — with real tiny models."""

from __future__ import annotations

import pytest

from data_synthesis.distill import (
    Distiller,
    ModelReasoner,
    ModelRewriter,
    Rewritten,
    RuleRewriter,
    align_style,
    normalize_trace,
    strip_hint,
    summarize_distilled,
)
from data_synthesis.prompts import hint_sentence
from judge.backends import make_backend
from judge.backends.base import SamplingParams
from tiny_world.servers.openai_server import make_app, serve

REWRITES = [
    # (text, after hint removal, after style alignment)
    (
        "<think>" + hint_sentence("B") + " The description says the shape is red.</think><answer>B</answer>",
        "<think>The description says the shape is red.</think><answer>B</answer>",
        "<think>the image shows the shape is red.</think><answer>B</answer>",
    ),
    (
        "<think>According to the description, A is wrong.</think><answer>B</answer>",  # no hint: unchanged by step 3
        "<think>According to the description, A is wrong.</think><answer>B</answer>",
        "<think>in the image, A is wrong.</think><answer>B</answer>",
    ),
    (
        "<think>I was told B is right, and the circle is described as blue.</think><answer>B</answer>",
        "<think></think><answer>B</answer>",
        "<think></think><answer>B</answer>",
    ),
]


@pytest.mark.parametrize(("text", "dehinted", "styled"), REWRITES)
def test_rules(text, dehinted, styled):
    assert strip_hint(text) == dehinted
    assert align_style(strip_hint(text)) == styled


def _items(n=6):
    return [
        {
            "id": f"i{i}",
            "image": None,
            "question": "What colour is the shape?",
            "candidates": ["The shape is red.", "The shape is blue.", "The shape is green."][: 2 + i % 2],
            "label": i % 2,
            "meta": {
                "split": "train",
                "description": "A red shape.",
                "flaws": [None, "hallucinated_attribute", "incomplete"][: 2 + i % 2],
            },
        }
        for i in range(n)
    ]


def _check(rows, items):
    # The parrot always reasons its way to B: kept exactly where the label is B.
    for row, item in zip(rows, items):
        assert row["kept"] == (item["label"] == 1), row
        assert row["drop_reason"] in (None, "wrong_answer")
        assert row["versions"]["reason"] == "reason@v1"
        if row["kept"]:
            assert row["completion"].startswith("<think>") and row["completion"].endswith("<answer>B</answer>")
            assert "hint" not in row["completion"].lower()
    summary = summarize_distilled(rows)
    assert summary["kept_fraction"] == pytest.approx(sum(i["label"] == 1 for i in items) / len(items))
    assert set(summary["kept_fraction_per_flaw"]) == {"hallucinated_attribute", "incomplete"}


def test_model_chain_through_transformers(parrot_loaded):
    from judge.backends.hf import TransformersBackend

    backend = TransformersBackend(parrot_loaded)
    items = _items()
    greedy = SamplingParams(max_new_tokens=64)  # the parrot's answers are checked greedy
    rows = Distiller(ModelReasoner(backend, greedy), ModelRewriter(backend, greedy))(items)
    _check(rows, items)
    assert rows[0]["versions"] == {
        "reason": "reason@v1",
        "hint_removal": "hint_removal@v1",
        "style_align": "style_align@v1",
    }


def test_model_reasoner_through_openai_http_with_rule_rewriter(parrot_loaded):
    items = _items(4)
    with serve(make_app(parrot_loaded)) as url:
        rows = Distiller(ModelReasoner(make_backend(url), SamplingParams(max_new_tokens=64)), RuleRewriter())(items)
    _check(rows, items)
    assert rows[0]["versions"]["hint_removal"] == "rules@v1"


def test_hint_leak_and_unparsed_are_dropped():
    class Fixed:
        tag = "fixed"

        def __init__(self, texts):
            self.texts = texts

        def __call__(self, items):
            return self.texts[: len(items)]

    class Keep:
        tags = {"hint_removal": None, "style_align": None}

        def __call__(self, texts, row_ids=None):
            return [Rewritten(t, t) for t in texts]

    items = _items(4)
    texts = [
        "<think>The hint says A.</think><answer>A</answer>",
        "no answer at all",
        "<answer>A</answer>",  # nothing to keep as reasoning
        "<think>Own thinking.</think><think>Written.</think><answer>B</answer>",  # native, then the asked block
    ]
    rows = Distiller(Fixed(texts), Keep())(items)
    assert [r["drop_reason"] for r in rows] == ["hint_leak", "unparsed", "no_reasoning", None]
    assert rows[3]["completion"] == "<think>Own thinking.</think><answer>B</answer>"


NORMAL_FORMS = [
    # (a model's answer text, normal form or None, drop reason)
    ("<think>Red matches.</think><answer>A</answer>", "<think>Red matches.</think><answer>A</answer>", None),
    ("Red matches. <answer>A</answer>", "<think>Red matches.</think><answer>A</answer>", None),  # no tags: before
    ("<think>One.</think><think>Two.</think><answer>A</answer>", None, "nested_think"),  # two blocks in a body
    (  # sentences that plan the tags go; the reasoning stays
        "<think>I put this in <think> tags. Red matches.</think><answer>B</answer>",
        "<think>Red matches.</think><answer>B</answer>",
        None,
    ),
    (
        "<think>Red matches. I use <answer> tags.</think><answer>B</answer>",
        "<think>Red matches.</think><answer>B</answer>",
        None,
    ),
    ("<think>Red matches.</think>", None, "unparsed"),
]


@pytest.mark.parametrize(("body", "normal", "reason"), NORMAL_FORMS)
def test_normalize_trace(body, normal, reason):
    assert normalize_trace(body, 2) == (normal, reason)

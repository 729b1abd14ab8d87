"""Reverse negative synthesis: reply parsing, screening, and the model generator on real backends."""

from __future__ import annotations

import pytest
from PIL import Image

from data_synthesis.negatives import ModelNegatives, parse_negatives_reply, screen_negatives
from data_synthesis.records import Negative
from judge.backends import make_backend
from tiny_world.servers.openai_server import make_app, serve

REPLIES = [
    ('[{"answer": "It is blue.", "flaw": "hallucinated_attribute"}]', 1),  # the asked-for form
    ('Here you go:\n[{"text": "It is blue.", "type": "Hallucinated attribute"}] Done.', 1),  # prose around, synonyms
    ('[{"answer": "a", "flaw": "incomplete"}, {"answer": "b", "flaw": "incorrect_knowledge"}]', 2),  # several
    ("[]", 0),  # a valid, empty list
    ('{"answer": "It is blue.", "flaw": "incomplete"}', None),  # an object, not a list
    ('[{"answer": 3, "flaw": "incomplete"}]', None),  # answer is not text
    ('[{"answer": "x", "flaw": "incomplete"}', None),  # truncated JSON
    ("I cannot help with that.", None),  # no JSON at all
]


@pytest.mark.parametrize(("reply", "n"), REPLIES)
def test_parse_replies(reply, n):
    parsed = parse_negatives_reply(reply)
    assert (parsed is None) if n is None else (len(parsed) == n)


def test_screening_rejects_and_counts():
    reference = "There are 3 circles."
    candidates = [
        Negative("There are 4 circles.", "hallucinated_count"),  # kept
        Negative("there are 3 circles", "hallucinated_count"),  # equals the reference after normalisation
        Negative("3 circles are there.", "hallucinated_count"),  # same content words: a restatement
        Negative("There are 4 circles!", "hallucinated_count"),  # duplicate of the first
        Negative("There are 5 circles.", "made_up_flaw"),  # not in the taxonomy
        Negative("There are 2 circles.", "hallucinated_count"),  # kept
    ]
    kept, rejected = screen_negatives(reference, candidates)
    assert [n.text for n in kept] == ["There are 4 circles.", "There are 2 circles."]
    assert rejected == {"equals_reference": 1, "restates_reference": 1, "duplicate": 1, "invalid_flaw": 1}


def _rows(tmp_path, n=3):
    Image.new("RGB", (84, 84), (200, 30, 30)).save(tmp_path / "red.png")
    return [
        {
            "id": f"r{i}",
            "image": "red.png",
            "question": "What colour is the shape?",
            "answer": "The shape is red.",
            "source": "t",
        }
        for i in range(n)
    ]


def _check(rows):
    for row in rows:
        assert [n["text"] for n in row["negatives"]] == [
            "The shape is purple.",
            "There are nine shapes.",
            "It is a shape.",
        ]
        meta = row["negatives_meta"]
        assert meta["attempts"] == 1 and meta["rejected"]["duplicate"] == 1 and meta["prompt"] == "negatives@v1"


def test_model_generator_through_transformers(parrot_loaded, tmp_path):
    from judge.backends.hf import TransformersBackend

    gen = ModelNegatives(
        TransformersBackend(parrot_loaded), n=3, temperature=0.0, max_new_tokens=256, image_root=tmp_path
    )
    _check(gen(_rows(tmp_path)))


def test_model_generator_through_openai_http(parrot_loaded, tmp_path):
    with serve(make_app(parrot_loaded)) as url:
        gen = ModelNegatives(make_backend(url), n=3, temperature=0.0, max_new_tokens=256, image_root=tmp_path)
        _check(gen(_rows(tmp_path, n=2)))


def test_model_generator_retries_unusable_replies(tiny_vlm_dir, tmp_path):
    # An untrained model never stops (and never writes JSON): every attempt is cut at its 8 tokens, counted as
    # truncated, and the row ends with no negatives.
    gen = ModelNegatives(
        make_backend(str(tiny_vlm_dir), device="cpu"), n=3, max_attempts=2, max_new_tokens=8, image_root=tmp_path
    )
    (row,) = gen(_rows(tmp_path, n=1))
    assert row["negatives"] == [] and row["negatives_meta"]["attempts"] == 2
    assert row["negatives_meta"]["rejected"]["truncated"] == 2

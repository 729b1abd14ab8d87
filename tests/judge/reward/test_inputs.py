"""Reading what TRL, OpenRLHF and verl hand a reward function: chat messages, templated queries, labels, extra_info."""

from __future__ import annotations

import pytest

from judge.reward.inputs import (
    JudgeLabel,
    completion_text,
    decode_label,
    prompt_text,
    question_text,
    split_query,
    verl_sample,
)

CHATML = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
VISION = "<|vision_start|><|image_pad|><|vision_end|>"


@pytest.mark.parametrize(
    ("query", "prompt", "response", "split"),
    [
        ("Q: 2+2? A: 4", "Q: 2+2? A: ", "4", True),  # plain text
        (CHATML.format(user="Hi?") + "Hello.<|im_end|>", CHATML.format(user="Hi?"), "Hello.", True),
        # A VLM policy: the processor expanded the one placeholder of the prompt to 64 pad tokens
        (
            CHATML.format(user=VISION.replace("<|image_pad|>", "<|image_pad|>" * 64) + "Hi?") + "Red.<|im_end|>",
            CHATML.format(user=VISION + "Hi?"),
            "Red.",
            True,
        ),
        # Two images, expanded differently
        (
            CHATML.format(
                user=VISION.replace("<|image_pad|>", "<|image_pad|>" * 4)
                + VISION.replace("<|image_pad|>", "<|image_pad|>" * 9)
            )
            + "Both.<|im_end|><|endoftext|>",
            CHATML.format(user=VISION + VISION),
            "Both.",
            True,
        ),
        ("something else entirely", "Q: ", "something else entirely", False),  # judged whole, flagged
    ],
)
def test_split_query(query, prompt, response, split):
    assert split_query(query, prompt) == (response, split)


@pytest.mark.parametrize(
    ("prompt", "question"),
    [
        ("Q: colour?", "Q: colour?"),  # no template: as is
        (CHATML.format(user=VISION + "What colour?"), "What colour?"),  # ChatML, image placeholder removed
        (
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHow many?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n",
            "How many?",
        ),  # Llama 3
        (
            "<bos><start_of_turn>user\n<start_of_image><image_soft_token><end_of_image>Which?<end_of_turn>\n"
            "<start_of_turn>model\n",
            "Which?",
        ),  # Gemma 3  # fmt: skip
    ],
)
def test_question_text(prompt, question):
    assert question_text(prompt) == question


@pytest.mark.parametrize(
    ("label", "expected"),
    [
        ("", JudgeLabel(None)),  # OpenRLHF without --data.label_key: no reference
        (None, JudgeLabel(None)),
        ("4", JudgeLabel("4")),
        ('{"reference": "4", "images": ["a.png"]}', JudgeLabel("4", ["a.png"])),
        ('{"images": "a.png"}', JudgeLabel(None, ["a.png"])),  # one image as a string
        ({"reference": "", "images": []}, JudgeLabel(None)),  # an object label, empty reference
        ('{"x": 1}', JudgeLabel('{"x": 1}')),  # an object without judge fields is a reference answer
        ("{not json}", JudgeLabel("{not json}")),
    ],
)
def test_decode_label(label, expected):
    assert decode_label(label) == expected


@pytest.mark.parametrize(
    ("label", "field"), [({"images": [3]}, "label.images"), ({"reference": 4}, "label.reference"), (7, "label")]
)
def test_decode_label_names_the_bad_field(label, field):
    with pytest.raises(ValueError, match=rf"^{field}:"):
        decode_label(label)


def test_verl_sample_reads_extra_info():
    extra = {"question": [{"role": "user", "content": "Why?"}], "images": [{"bytes": b"\x89PNG"}, "a.png"]}
    question, reference, images = verl_sample("Because.", "", extra)
    assert (question, reference) == ("Why?", None)  # "" is no reference
    assert images[0].startswith("data:image/png;base64,") and images[1] == "a.png"
    assert verl_sample("x", "r", {"question": "Q", "reference": "R"})[1] == "R"  # extra_info wins
    with pytest.raises(ValueError, match=r"extra_info\['question'\]"):
        verl_sample("x", "r", {"index": 0})


# -- TRL's prompts and completions ------------------------------------------------------------------------------

MULTI_TURN = [{"role": "user", "content": "A"}, {"role": "assistant", "content": "x"}, {"role": "user", "content": "B"}]
TOOL_USE = [
    {"role": "assistant", "content": "call"},
    {"role": "tool", "content": "42"},
    {"role": "assistant", "content": "It is 42."},
]


@pytest.mark.parametrize(
    ("prompt", "text"),
    [
        ("Plain?", "Plain?"),  # standard (non-conversational) prompt
        ([{"role": "user", "content": "Q?"}], "Q?"),  # conversational, string content
        ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Q?"}], "Q?"),  # system left out
        ([{"role": "user", "content": [{"type": "image", "image": None}, {"type": "text", "text": "Q?"}]}], "Q?"),
        (MULTI_TURN, "A\n\nB"),  # multi-turn: every user turn
    ],
)
def test_prompt_text(prompt, text):
    assert prompt_text(prompt) == text


@pytest.mark.parametrize(
    ("completion", "text"),
    [
        ("Red.", "Red."),  # standard
        ([{"role": "assistant", "content": "Red."}], "Red."),  # conversational
        ([{"role": "assistant", "content": [{"type": "text", "text": "Red."}]}], "Red."),  # content blocks
        (TOOL_USE, "It is 42."),  # tool use: the final answer
        ([], ""),  # nothing generated
        ([{"role": "assistant", "content": [{"type": "text", "text": None}]}], ""),  # a part with no text
    ],
)
def test_completion_text(completion, text):
    assert completion_text(completion) == text

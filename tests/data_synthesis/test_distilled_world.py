"""The paper's distillation on the synthetic world: a describer that errs as a captioner does, a text reasoner
that reads only the description, and the paper's filter with its drops counted by reason."""

from __future__ import annotations

import json
import math
import random

import pytest

from data_synthesis.describe import SceneDescriber, describe_world, measured_error_rate
from data_synthesis.distill import DescriptionReasoner, Distiller, RuleRewriter, false_fact_share, summarize_distilled
from data_synthesis.world import (
    Scene,
    describe_scene,
    description_reasoner,
    make_item,
    misread,
    question_answer,
    read_description,
    read_question,
    sample_item,
    scene_negatives,
)
from data_synthesis.world.questions import _answer


def _items(n: int, rate: float, seed: int = 0) -> list[dict]:
    """Two-option MC items (reference first) over world records, each with its description at `rate`."""
    items = []
    for i in range(n):
        item = make_item(i, 0, image_path=f"images/{i}.png", size=84, shaded=True)
        scene, task = item.scene, item.task
        question, answer = item.record.question, item.record.answer
        negative = scene_negatives(item, 1, random.Random(i))[0]
        world = {"scene": scene.to_dict(), "task": task.to_dict()}
        description, _ = describe_world(world["scene"], f"world-{i:06d}", rate, seed)
        items.append(
            {
                "id": f"world-{i:06d}/n0",
                "question": question,
                "candidates": [answer, negative.text],
                "label": 0,
                "meta": {"description": description, "world": world, "flaws": [None, negative.flaw]},
            }
        )
    return items


def test_a_description_reads_back_as_its_scene_and_every_question_as_its_task():
    for i in range(200):
        scene, task = sample_item(i, 0, size=84, shaded=i % 2 == 0)
        text = describe_scene(scene)
        read = read_description(text)
        assert describe_scene(read) == text
        question, answer = question_answer(scene, task)
        assert _answer(read, read_question(read, question)) == answer


@pytest.mark.parametrize("rate", [0.1, 0.3])
def test_the_measured_error_rate_is_the_set_one_within_sampling_error(rate):
    readings = [misread(sample_item(i, 0)[0], rate, random.Random(i)) for i in range(600)]
    facts = sum(r.facts for r in readings)
    measured = sum(len(r.errors) for r in readings) / facts
    assert abs(measured - rate) < 4 * math.sqrt(rate * (1 - rate) / facts)  # four standard errors
    kinds = {
        "left out" if line.endswith("left out") else line.split(":")[0].split()[-1]
        for r in readings
        for line in r.errors
    }
    assert kinds == {"left out", "kind", "colour", "size", "cell", "word"}  # a captioner's errors, every kind


def test_the_scene_describer_records_what_it_misread_and_is_seeded_per_record():
    rows = [{"id": f"r{i}", "world": {"scene": sample_item(i, 0)[0].to_dict()}} for i in range(300)]
    described = SceneDescriber(0.2, seed=3)(rows)
    assert described == SceneDescriber(0.2, seed=3)(list(reversed(rows)))[::-1]  # per record, not per position
    assert described != SceneDescriber(0.2, seed=4)(rows)
    assert all(row["description_meta"]["misread"] == len(row["description_meta"]["errors"]) for row in described)
    assert abs(measured_error_rate(described) - 0.2) < 0.03
    exact = SceneDescriber()(rows)
    assert [row["description"] for row in exact] == [describe_scene(Scene.from_dict(r["world"]["scene"])) for r in rows]
    assert measured_error_rate(exact) is None  # nothing described with errors


def test_the_reasoner_never_reads_the_scene():
    """Change the scene after the describe stage: the trace stays the same."""
    items = _items(40, 0.2)
    before = DescriptionReasoner("checks")(items)
    for item in items:
        scene = item["meta"]["world"]["scene"]
        for shape in scene["shapes"]:
            shape["colour"], shape["kind"] = "yellow", "circle"
        item["meta"]["world"]["task"] = {"kind": "count", "params": {}}
    assert DescriptionReasoner("checks")(items) == before
    stripped = [{**item, "meta": {"description": item["meta"]["description"]}} for item in items]
    assert DescriptionReasoner("checks")(stripped) == before


def test_exact_descriptions_give_the_scene_reasoners_traces():
    from data_synthesis.distill import SceneReasoner

    items = _items(60, 0.0)
    assert DescriptionReasoner("checks")(items) == SceneReasoner("checks")(items)
    distilled = Distiller(DescriptionReasoner("checks"), RuleRewriter())(items)
    assert all(row["kept"] for row in distilled) and false_fact_share(items, distilled, "checks") == 0.0


def test_a_misreading_gives_a_wrong_answer_or_a_hint_led_trace_with_the_hint_removed():
    scene, task = sample_item(0, 0, size=84)  # an attribute question: the colour or size of one shape
    question, answer = question_answer(scene, task)
    wrong_colour = Scene.from_dict(json.loads(json.dumps(scene.to_dict())))
    asked = wrong_colour.shapes[task.params["shape"]]
    seen = "blue" if asked.colour != "blue" else "red"
    setattr(asked, task.params["attribute"], seen if task.params["attribute"] == "colour" else "small")
    misread_answer = _answer(wrong_colour, task)
    assert misread_answer != answer
    description = describe_scene(wrong_colour)
    # An option says what the misreading says: the reasoner trusts its reading, against the hint.
    trusted = description_reasoner(description, question, [answer, misread_answer], 0, "checks")
    assert trusted.endswith("<answer>B</answer>") and "hint" not in trusted
    # No option says it and the closest one is not the hinted one: the reasoner leans on the hint, and says so.
    leaned = description_reasoner(description, question, [answer, "Nothing at all."], 1, "checks")
    assert leaned.endswith("<answer>B</answer>") and "hint points to B" in leaned
    assert "A is closest" in description_reasoner(description, question, [answer, "Nothing at all."], 0, "checks")


def test_a_reasoner_that_ignores_the_hint_answers_its_reading_or_nothing():
    """`hint="ignore"`: no option matching the reading → the closest option, whatever the hint says; the asked
    object missing from the description → no answer at all. Where the reading settles it, both agree."""
    scene, task = sample_item(0, 0, size=84)
    question, answer = question_answer(scene, task)
    description = describe_scene(scene)
    options = [answer, "Nothing at all."]
    assert description_reasoner(description, question, options, 0, "checks", hint="ignore") == description_reasoner(
        description, question, options, 0, "checks"
    )
    read = description_reasoner(description, question, ["Nothing.", "Nothing at all."], 0, "checks", hint="ignore")
    assert read.endswith("<answer>B</answer>") and "B is closest" in read and "hint" not in read
    asked = scene.shapes[task.params["shape"]]
    as_dict = scene.to_dict()
    as_dict["shapes"] = [s for s in as_dict["shapes"] if s["kind"] != asked.kind]
    empty = describe_scene(Scene.from_dict(as_dict))
    cannot = description_reasoner(empty, question, options, 0, "checks", hint="ignore")
    assert "<answer>" not in cannot and "cannot tell" in cannot and f"no {asked.kind}" in cannot
    assert "hint points to A" in description_reasoner(empty, question, options, 0, "checks")
    with pytest.raises(ValueError, match="hint must be one of"):
        description_reasoner(description, question, options, 0, "checks", hint="follow")


def test_ignoring_the_hint_drops_more_and_keeps_no_hint_led_trace():
    items = _items(150, 0.3)
    lean = Distiller(DescriptionReasoner("checks"), RuleRewriter())(items)
    ignore = Distiller(DescriptionReasoner("checks", hint="ignore"), RuleRewriter())(items)
    assert not any("hint" in (row["trace"]["reasoned"] or "") for row in ignore)
    assert sum(row["kept"] for row in ignore) < sum(row["kept"] for row in lean)
    reasons = summarize_distilled([{**row, "flaws": []} for row in ignore])["drop_reasons"]
    assert set(reasons) == {"wrong_answer", "unparsed"}  # a closest option not the label; no answer at all
    kept_ids = {row["id"] for row in ignore if row["kept"]}
    assert kept_ids <= {row["id"] for row in lean if row["kept"]}  # what the reading settles, both keep
    assert DescriptionReasoner("checks", hint="ignore").tag == "description_reasoner:checks:hint=ignore"


def test_drops_are_counted_by_reason_and_kept_traces_carry_no_hint():
    items = _items(150, 0.3)
    rows = Distiller(DescriptionReasoner("checks"), RuleRewriter())(items)
    summary = summarize_distilled([{**row, "flaws": []} for row in rows])
    dropped = [row for row in rows if not row["kept"]]
    assert dropped and summary["drop_reasons"] == {"wrong_answer": len(dropped)}
    assert all("hint" not in row["completion"].lower() for row in rows if row["kept"])
    assert any("hint" in (row["trace"]["reasoned"] or "") for row in rows if row["kept"])  # the hint was there
    share = false_fact_share(items, rows, "checks")
    assert 0 < share < 1


def test_the_command_line_distils_from_descriptions_with_errors(tmp_path):
    """`synth describe --describe-error-rate` and `synth distill --reasoner description`: the settings are
    recorded, the measured rate is in the describe summary, drops are counted by reason."""
    from mrjudge.cli import main

    world = str(tmp_path / "w")
    assert main(["synth", "world", "--n", "60", "--out", world]) == 0
    assert main(["synth", "negatives", "--input", world, "--out", world]) == 0
    describe = ["synth", "describe", "--input", world, "--out", world, "--describe-error-rate", "0.3"]
    assert main(describe) == 0
    summary = json.loads((tmp_path / "w" / "described.summary.json").read_text())
    assert 0.2 < summary["measured_error_rate"] < 0.4
    assert main(["synth", "assemble", "--input", world, "--out", world, "--val-fraction", "0.2"]) == 0
    distill = ["synth", "distill", "--input", world, "--out", world, "--reasoner", "description"]
    assert main(distill) == 0
    distilled = json.loads((tmp_path / "w" / "distilled.summary.json").read_text())
    assert distilled["kept"] + sum(distilled["drop_reasons"].values()) == 60
    settings = (tmp_path / "w" / "distilled.settings.json").read_text()
    assert '"kind": "description"' in settings
    assert main(describe[:-2] + ["--describe-error-rate", "0.1"]) == 2  # other settings: refused, not mixed
    assert main(distill + ["--reasoner-hint", "ignore"]) == 2  # the reasoner's settings are recorded too
    assert main(distill + ["--reasoner-hint", "ignore", "--overwrite"]) == 0
    ignored = json.loads((tmp_path / "w" / "distilled.settings.json").read_text())
    assert ignored["reasoner"] == {"kind": "description", "style": "diff", "hint": "ignore"}
    scene_only = ["synth", "distill", "--input", world, "--out", str(tmp_path / "s"), "--reasoner-hint", "ignore"]
    assert main(scene_only) == 2  # the scene reasoner has no hint to ignore

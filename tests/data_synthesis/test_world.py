"""The synthetic world: determinism, gold answers that agree with the scene, resumable output, exact negatives
and the scene reasoner. In-memory or tmp_path only, no network."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

import data_synthesis.world as world
from data_synthesis.records import FLAWS, Flaw, SFTRecord
from data_synthesis.world import (
    TASK_KINDS,
    Scene,
    Shape,
    Task,
    Text,
    WorldItem,
    describe_scene,
    load_world,
    make_item,
    question_answer,
    render,
    sample_item,
    scene_negatives,
    scene_reasoner,
    write_world,
)
from judge.parser import parse_choice


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _item(scene: Scene, task: Task) -> WorldItem:
    question, answer = question_answer(scene, task)
    return WorldItem(SFTRecord("world-x", "x.png", question, answer, f"world/{task.kind}"), scene, task)


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


ITEMS = [make_item(i, 7, image_path=f"images/world-{i:06d}.png") for i in range(200)]

# A red circle at the top left and a blue square at the bottom right; a word and two digits.
SHAPES = Scene(112, 112, [Shape("circle", "red", "large", 18, 18), Shape("square", "blue", "small", 93, 93)], [])
WORDS = Scene(112, 112, [], [Text("CAT", 56, 18, "blue"), Text("3", 18, 93, "black"), Text("5", 93, 93, "black")])


# --- determinism ---------------------------------------------------------------------------------------


def test_same_seed_same_bytes_and_other_seed_differs(tmp_path):
    a, b, c = (write_world(10, seed, tmp_path / name) for name, seed in (("a", 0), ("b", 0), ("c", 1)))
    files = _files(a)
    assert files == _files(b)
    assert {"records.jsonl", "scenes.jsonl", "images/world-000009.png"} <= set(files)
    assert files["records.jsonl"] != _files(c)["records.jsonl"]


def test_item_does_not_depend_on_n(tmp_path):
    small, large = _files(write_world(5, 3, tmp_path / "s")), _files(write_world(12, 3, tmp_path / "l"))
    for name in ("records.jsonl", "scenes.jsonl"):
        assert large[name].splitlines()[:5] == small[name].splitlines()
    assert all(large[f"images/world-{i:06d}.png"] == small[f"images/world-{i:06d}.png"] for i in range(5))


def test_every_kind_in_any_ten_consecutive_items():
    kinds = [sample_item(i, 11)[1].kind for i in range(60)]
    assert all(set(kinds[i : i + 10]) == set(TASK_KINDS) for i in range(50))


def test_render_draws_the_scene():
    for item in ITEMS[:20]:
        image = render(item.scene)
        assert image.size == (112, 112) and image.tobytes() == render(item.scene).tobytes()
        for shape in item.scene.shapes:  # every shape's centre has its colour
            assert image.getpixel((shape.x, shape.y)) == world.RGB[shape.colour]


def test_shaded_scene_shows_each_cell_on_its_own_background(tmp_path):
    plain = make_item(3, 7, image_path="x.png", size=84)
    shaded = make_item(3, 7, image_path="x.png", size=84, shaded=True)
    assert shaded.record == plain.record and shaded.task == plain.task  # same question and answer
    assert shaded.scene.shapes == plain.scene.shapes and "shaded" not in plain.scene.to_dict()
    image, used = render(shaded.scene), {world._cell(shaded.scene, s.x, s.y) for s in shaded.scene.shapes}
    backgrounds = set()
    for cell in set(range(9)) - used:
        row, col = divmod(cell, 3)
        colour = image.getpixel((col * 28 + 3, row * 28 + 3))
        assert colour == world.CELL_SHADES[row][col]
        backgrounds.add(colour)
    assert len(backgrounds) == 9 - len(used)  # no two cells alike
    for shape in shaded.scene.shapes:
        assert image.getpixel((shape.x, shape.y)) == world.RGB[shape.colour]
    assert describe_scene(shaded.scene).startswith("A shaded 84x84 image. Shapes: ")
    assert Scene.from_dict(json.loads(json.dumps(shaded.scene.to_dict()))) == shaded.scene
    write_world(3, 0, tmp_path, size=84, shaded=True)
    assert load_world(tmp_path)[0].scene.shaded
    with pytest.raises(ValueError, match="another seed, size or shading"):
        write_world(3, 0, tmp_path, size=84)


def test_scene_and_task_round_trip_through_json():
    for item in ITEMS[:10]:
        assert Scene.from_dict(json.loads(json.dumps(item.scene.to_dict()))) == item.scene
        assert Task.from_dict(json.loads(json.dumps(item.task.to_dict()))) == item.task


# --- gold answers ----------------------------------------------------------------------------------------


def test_gold_answers_agree_with_the_scene():
    seen = set()
    for item in ITEMS:
        scene, p, answer = item.scene, item.task.params, item.record.answer
        seen.add(item.task.kind)
        assert item.record.source == f"world/{item.task.kind}" and item.record.id.startswith("world-")
        if item.task.kind == "attribute":
            assert getattr(scene.shapes[p["shape"]], p["attribute"]) in answer
        elif item.task.kind == "count":
            n = sum(all(getattr(s, k) == p[k] for k in ("kind", "colour") if k in p) for s in scene.shapes)
            assert n >= 1 and f" {n} " in answer
        elif item.task.kind == "spatial":
            a, b = scene.shapes[p["a"]], scene.shapes[p["b"]]
            if p["axis"] == "horizontal":
                assert a.x != b.x and ("to the left of" if a.x < b.x else "to the right of") in answer
            else:
                assert a.y != b.y and (" above " if a.y < b.y else " below ") in answer
        elif item.task.kind == "ocr":
            assert f'"{scene.texts[p["text"]].text}"' in answer
        else:
            assert answer.endswith(f"= {sum(int(scene.texts[i].text) for i in p['texts'])}.")
    assert seen == set(TASK_KINDS)


def test_describe_scene_mentions_every_object():
    for item in ITEMS[:100]:
        text = describe_scene(item.scene)
        assert all(s.colour in text and s.kind in text for s in item.scene.shapes)
        assert all(f'"{t.text}"' in text for t in item.scene.texts)
    assert describe_scene(ITEMS[0].scene) == describe_scene(ITEMS[0].scene)


# --- write_world / load_world ------------------------------------------------------------------------------


def test_load_world_reads_back_what_make_item_makes(tmp_path):
    items = load_world(write_world(6, 5, tmp_path))
    assert items == [make_item(i, 5, image_path=f"images/world-{i:06d}.png") for i in range(6)]
    assert all((tmp_path / item.record.image).exists() for item in items)


def test_world_item_from_a_pipeline_row():
    item = ITEMS[3]
    row = {**item.record.to_dict(), "world": {"scene": item.scene.to_dict(), "task": item.task.to_dict()}, "x": 1}
    assert world.world_item_from_row(json.loads(json.dumps(row))) == item


def test_resume_after_a_crash_matches_an_uninterrupted_run(tmp_path, monkeypatch):
    reference = _files(write_world(8, 2, tmp_path / "ref"))
    monkeypatch.setattr(world.files, "_BATCH", 3)  # write_world reads it from its module

    def crash(done: int) -> None:
        if done == 6:
            raise RuntimeError("killed")

    out = tmp_path / "out"
    with pytest.raises(RuntimeError):
        write_world(8, 2, out, progress=crash)
    assert not (out / "records.jsonl").exists()  # never half-published
    with open(out / "scenes.jsonl.partial", "a") as handle:  # a torn last line from the crash
        handle.write('{"id": "world-000006", "sce')
    (out / "images/world-000001.png").unlink()  # and a lost image of a finished item
    calls = []
    write_world(8, 2, out, progress=calls.append)
    assert _files(out) == reference
    assert calls[-1] == 8
    ids = [json.loads(line)["id"] for line in (out / "records.jsonl").read_text().splitlines()]
    assert ids == [f"world-{i:06d}" for i in range(8)]


def test_resume_after_lost_lines(tmp_path):
    reference = _files(write_world(8, 4, tmp_path / "ref"))
    out = write_world(8, 4, tmp_path / "out")
    for name, keep in (("records.jsonl", 5), ("scenes.jsonl", 7)):  # the last lines of each are gone
        lines = (out / name).read_text().splitlines(keepends=True)
        (out / name).write_text("".join(lines[:keep]))
    write_world(8, 4, out)
    assert _files(out) == reference


def test_resume_refuses_another_seed(tmp_path):
    write_world(4, 0, tmp_path)
    with pytest.raises(ValueError, match="another seed"):
        write_world(4, 1, tmp_path)


# --- scene_negatives ---------------------------------------------------------------------------------------


def test_negatives_are_tagged_distinct_and_wrong():
    flaws = set()
    for i, item in enumerate(ITEMS):
        negatives = scene_negatives(item, 3, random.Random(i))
        texts = [_norm(n.text) for n in negatives]
        assert len(negatives) == 3
        assert all(n.flaw in FLAWS for n in negatives)
        assert len(set(texts)) == 3 and _norm(item.record.answer) not in texts
        assert negatives == scene_negatives(item, 3, random.Random(i))  # deterministic for an rng state
        flaws |= {n.flaw for n in negatives}
    assert flaws == set(FLAWS)


def test_asking_for_many_negatives_returns_what_exists_without_duplicates():
    for item in ITEMS[:25]:
        negatives = scene_negatives(item, 500, random.Random(0))
        assert 3 <= len(negatives) < 500
        assert len({_norm(n.text) for n in negatives} | {_norm(item.record.answer)}) == len(negatives) + 1
    assert scene_negatives(ITEMS[0], 0, random.Random(0)) == []


NEGATIVE_CASES = [
    # gold: "The circle at the top left is red."
    (
        SHAPES,
        {"shape": 0, "attribute": "colour"},
        "The circle at the top left is blue.",
        Flaw.HALLUCINATED_ATTRIBUTE,
    ),  # recoloured
    (
        SHAPES,
        {"shape": 0, "attribute": "colour"},
        "The circle at the bottom left is red.",
        Flaw.HALLUCINATED_SPATIAL,
    ),  # moved to a free cell
    (
        SHAPES,
        {"shape": 0, "attribute": "colour"},
        "The triangle at the top left is red.",
        Flaw.HALLUCINATED_OBJECT,
    ),  # a kind the scene lacks
    (SHAPES, {"shape": 0, "attribute": "colour"}, "The circle is at the top left.", Flaw.INCOMPLETE),  # no colour
    (
        SHAPES,
        {"shape": 0, "attribute": "size"},
        "The circle at the top left is small.",
        Flaw.HALLUCINATED_ATTRIBUTE,
    ),  # shrunk
    # gold: "There is 1 circle, at the top left."
    (SHAPES, {"kind": "circle"}, "There are no circles.", Flaw.HALLUCINATED_COUNT),  # the circle removed
    (
        SHAPES,
        {"kind": "circle"},
        "There are 2 circles, at the top left.",
        Flaw.INCORRECT_REASONING,
    ),  # one place, counted two
    (
        SHAPES,
        {"kind": "circle"},
        "There is 1 circle, at the top left, and every circle has four corners.",
        Flaw.INCORRECT_KNOWLEDGE,
    ),
    # gold: "The red circle is to the left of the blue square."
    (
        SHAPES,
        {"a": 0, "b": 1, "axis": "horizontal"},
        "The red circle is to the right of the blue square.",
        Flaw.HALLUCINATED_SPATIAL,
    ),  # swapped
    (
        SHAPES,
        {"a": 0, "b": 1, "axis": "vertical"},
        "The red circle is below the blue square.",
        Flaw.HALLUCINATED_SPATIAL,
    ),  # swapped
    (
        SHAPES,
        {"a": 0, "b": 1, "axis": "horizontal"},
        "The red circle is near the blue square.",
        Flaw.INCOMPLETE,
    ),  # no direction
    (
        SHAPES,
        {"a": 0, "b": 1, "axis": "horizontal"},
        "The red circle is to the left of the blue triangle.",
        Flaw.HALLUCINATED_OBJECT,
    ),
    # gold: 'The word "CAT" is written in blue.'
    (WORDS, {"text": 0}, 'The word "CAT" is written in red.', Flaw.HALLUCINATED_ATTRIBUTE),  # recoloured text
    (WORDS, {"text": 0}, 'The word "CAT" is written.', Flaw.INCOMPLETE),  # no colour
    (
        WORDS,
        {"text": 0},
        'The word "CAT" is written in blue, and blue is the colour of fresh grass.',
        Flaw.INCORRECT_KNOWLEDGE,
    ),
    # gold: "The numbers are 3 and 5, and 3 + 5 = 8."
    (WORDS, {"texts": [1, 2]}, "The numbers are 3 and 5, and 3 + 5 = 9.", Flaw.INCORRECT_REASONING),  # wrong sum
    (WORDS, {"texts": [1, 2]}, "The numbers are 3 and 5.", Flaw.INCOMPLETE),  # no sum
    (
        WORDS,
        {"texts": [1, 2]},
        "The numbers are 3 and 5, and adding means multiplying, so 3 + 5 = 15.",
        Flaw.INCORRECT_KNOWLEDGE,
    ),
]


@pytest.mark.parametrize(("scene", "params", "text", "flaw"), NEGATIVE_CASES)
def test_negative_cases(scene, params, text, flaw):
    kind = {"shape": "attribute", "text": "ocr", "texts": "arithmetic", "a": "spatial"}.get(next(iter(params)), "count")
    negatives = scene_negatives(_item(scene, Task(kind, params)), 100, random.Random(0))
    assert (text, flaw.value) in [(n.text, n.flaw) for n in negatives]


def test_text_negatives_change_exactly_one_character():
    ocr = scene_negatives(_item(WORDS, Task("ocr", {"text": 0})), 100, random.Random(0))
    words = [n.text.split('"')[1] for n in ocr if n.flaw == Flaw.HALLUCINATED_TEXT.value]
    assert words and all(len(w) == 3 and sum(a != b for a, b in zip(w, "CAT")) == 1 for w in words)
    sums = [n.text for n in scene_negatives(_item(WORDS, Task("arithmetic", {"texts": [1, 2]})), 100, random.Random(0))]
    extra = [t for t in sums if t.count("+") == 2]  # hallucinated object: a third number, summed consistently
    for text in extra:
        terms, total = text[:-1].split(", and ")[-1].split(" = ")
        assert sum(int(x) for x in terms.split(" + ")) == int(total)
    assert extra


# --- scene_reasoner ---------------------------------------------------------------------------------------

# Two questions about SHAPES (the circle's colour; which side of the square it is on), their right answers,
# and the wrong ones the reasoner tests offer beside them.
COLOUR = Task("attribute", {"shape": 0, "attribute": "colour"})
RED_CIRCLE = "The circle at the top left is red."
BLUE_CIRCLE = "The circle at the top left is blue."
RED_AND_COLD = "The circle at the top left is red, and red is cold."  # right, plus a made-up fact
SIDE = Task("spatial", {"a": 0, "b": 1, "axis": "horizontal"})
LEFT_OF = "The red circle is to the left of the blue square."
RIGHT_OF = "The red circle is to the right of the blue square."


def test_reasoner_picks_the_gold_answer_at_every_position():
    for i, item in enumerate(ITEMS):
        options = [n.text for n in scene_negatives(item, 3, random.Random(i))]
        random.Random(i).shuffle(options)
        position = i % (len(options) + 1)
        options.insert(position, item.record.answer)
        out = scene_reasoner(item.scene, item.task, item.record.question, options)
        assert parse_choice(out, len(options)) == position, out
        assert out.startswith("<think>Image: ") and out.count(", no.") == len(options) - 1


def test_reasoner_is_a_function_of_scene_and_options():
    outs = {scene_reasoner(it.scene, it.task, it.record.question, [it.record.answer, "No idea."]) for it in ITEMS[:30]}
    assert len(outs) == 30
    item = ITEMS[0]
    options = [n.text for n in scene_negatives(item, 2, random.Random(0))] + [item.record.answer]
    assert scene_reasoner(item.scene, item.task, "", options) != scene_reasoner(
        item.scene, item.task, "", options[::-1]
    )


def test_reasoner_verdicts_name_the_difference():
    options = [BLUE_CIRCLE, "The circle is at the top left.", RED_CIRCLE]
    out = scene_reasoner(SHAPES, COLOUR, "What colour is the circle?", options)
    assert out == (
        "<think>Image: a large red circle at the top left. A: says blue, but it is red, no. "
        "B: leaves out red, no. C: matches, yes.</think><answer>C</answer>"
    )


def test_reasoner_falls_back_to_the_closest_option():
    task = Task("arithmetic", {"texts": [1, 2]})
    options = ["The numbers are 3 and 5, and 3 + 5 = 9.", "I think it is about twelve."]
    out = scene_reasoner(WORDS, task, "", options)
    assert "None is right; A is closest." in out and parse_choice(out, 2) == 0


def _items_with_options(n: int = 100):
    """(item, options) for the first `n` world items: the answer among two scene negatives, in a varying slot."""
    from data_synthesis.world import make_item, scene_negatives

    for index in range(n):
        item = make_item(index, 5, image_path="x.png")
        options = [negative.text for negative in scene_negatives(item, 2, random.Random(index))]
        options.insert(index % (len(options) + 1), item.record.answer)
        yield item, options


def test_restate_style_decides_like_diff_style():
    from data_synthesis.world import scene_reasoner
    from judge.parser import parse_choice

    for item, options in _items_with_options():
        diff = scene_reasoner(item.scene, item.task, item.record.question, options, style="diff")
        restate = scene_reasoner(item.scene, item.task, item.record.question, options, style="restate")
        assert (
            parse_choice(diff, len(options)) == parse_choice(restate, len(options)) == options.index(item.record.answer)
        )
        assert restate.count(", yes.") == 1 and restate.count(", no.") == len(options) - 1


def test_contrast_style_names_the_disputed_slot_in_letter_order():
    out = scene_reasoner(SHAPES, COLOUR, "", [BLUE_CIRCLE, RED_CIRCLE], style="contrast")
    assert out == "<think>A says blue; B says red. Image: red. B is right.</think><answer>B</answer>"
    added = scene_reasoner(SHAPES, COLOUR, "", [RED_CIRCLE, RED_AND_COLD], style="contrast")
    assert added == "<think>B adds red is cold, which is wrong. A is right.</think><answer>A</answer>"


def test_contrast_style_decides_like_diff_style():
    from data_synthesis.world import scene_reasoner
    from judge.parser import parse_choice

    for item, options in _items_with_options():
        contrast = scene_reasoner(item.scene, item.task, item.record.question, options, style="contrast")
        assert parse_choice(contrast, len(options)) == options.index(item.record.answer)
        assert "Image:" in contrast or " adds " in contrast or " leaves out " in contrast


def test_pairs_style_puts_each_option_fact_beside_the_image_fact():
    out = scene_reasoner(SHAPES, COLOUR, "", [BLUE_CIRCLE, RED_CIRCLE], style="pairs")
    assert out == (
        "<think>Image: circle top left red. A: circle-circle yes; top-top yes; left-left yes; blue-red no; so no. "
        "B: circle-circle yes; top-top yes; left-left yes; red-red yes; so yes.</think><answer>B</answer>"
    )
    added = scene_reasoner(SHAPES, COLOUR, "", [RED_AND_COLD, RED_CIRCLE], style="pairs")
    assert "red-none no; cold-none no; so no. B:" in added and added.endswith("<answer>B</answer>")


def test_keyed_style_puts_each_fact_right_after_its_kind_then_gives_diff_verdicts():
    out = scene_reasoner(SHAPES, SIDE, "", [RIGHT_OF, LEFT_OF], style="keyed")
    assert out == (
        "<think>Image: circle red, circle large, circle top left and square blue, square small, square bottom "
        "right, so the circle is to the left of the square. A: says to the right of, but it is to the left of, "
        "no. B: matches, yes.</think><answer>B</answer>"
    )
    # Only the image line differs from "diff": the verdicts and the choice are the same.
    diff = scene_reasoner(SHAPES, SIDE, "", [RIGHT_OF, LEFT_OF], style="diff")
    assert out.split(". A: ", 1)[1] == diff.split(". A: ", 1)[1]


def test_checks_style_checks_each_fact_keyed_by_the_shape_it_is_about():
    wrong = LEFT_OF.replace("blue", "green")
    out = scene_reasoner(SHAPES, SIDE, "", [wrong, LEFT_OF], style="checks")
    keyed = scene_reasoner(SHAPES, SIDE, "", [wrong, LEFT_OF], style="keyed")
    assert out.split(" A: ", 1)[0] == keyed.split(" A: ", 1)[0]  # the keyed image line
    first = "circle red against red yes; circle against circle yes; to the left of against to the left of yes"
    assert out.split(" A: ", 1)[1] == (
        f"{first}; square green against blue no; square against square yes; so no. "
        f"B: {first}; square blue against blue yes; square against square yes; so yes.</think><answer>B</answer>"
    )
    added = scene_reasoner(SHAPES, COLOUR, "", [RED_CIRCLE, RED_AND_COLD], style="checks")
    checked = "circle against circle yes; circle top left against top left yes"
    assert f"B: {checked}; circle red against red yes; red cold against none no; so no." in added
    missing = scene_reasoner(SHAPES, COLOUR, "", ["The circle is at the top left.", RED_CIRCLE], style="checks")
    assert missing.startswith("<think>Image: circle red, circle large, circle top left. A: ")
    assert f"A: {checked}; circle none against red no; so no." in missing


def test_checks_style_decides_like_diff_style():
    from data_synthesis.world import make_item, scene_negatives
    from judge.parser import parse_choice

    for index in range(150):
        item = make_item(index, 7, image_path="x.png")
        options = [n.text for n in scene_negatives(item, 2, random.Random(index))]
        options.insert(index % (len(options) + 1), item.record.answer)
        checks = scene_reasoner(item.scene, item.task, item.record.question, options, style="checks")
        diff = scene_reasoner(item.scene, item.task, item.record.question, options, style="diff")
        assert parse_choice(checks, len(options)) == parse_choice(diff, len(options))
        assert checks.count("so yes.") == 1, checks


def test_scene_style_describes_the_whole_picture_then_gives_diff_verdicts():
    out = scene_reasoner(SHAPES, COLOUR, "", [BLUE_CIRCLE, RED_CIRCLE], style="scene")
    assert out == (
        "<think>Image: Shapes: a large red circle at the top left; a small blue square at the bottom right. "
        "Text: none. A: says blue, but it is red, no. B: matches, yes.</think><answer>B</answer>"
    )
    # The picture is worded exactly as the describe stage words it.
    assert describe_scene(SHAPES).split(" image. ", 1)[1] in out


def test_reasoner_styles_are_a_registry_and_an_unknown_name_lists_the_known_ones():
    from data_synthesis.distill import SceneReasoner
    from data_synthesis.world import REASONER_STYLES, REASONERS, reasoner_style

    assert REASONER_STYLES == ("diff", "restate", "contrast", "pairs", "scene", "keyed", "checks")
    assert tuple(REASONERS) == REASONER_STYLES and reasoner_style("checks") is REASONERS["checks"]
    with pytest.raises(ValueError, match=r"one of \('diff', 'restate', .*'checks'\), got 'dif'"):
        scene_reasoner(SHAPES, COLOUR, "", ["a", "b"], style="dif")
    with pytest.raises(ValueError, match="got 'dif'"):
        SceneReasoner("dif")  # a pipeline with a misspelt style fails before any batch runs

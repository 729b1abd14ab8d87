"""The embedded synthetic world: seeded pictures of shapes and words whose gold answers come from a known scene.

It is the default data of the demo and the tests, small enough for a tiny VLM trained on a CPU: a white
112x112 image, objects on a 3x3 grid (so "left of" and "above" are never ambiguous), four clearly distinct
colours, and text large enough to read after resizing. Because the scene is known, everything built on it is
exact: the gold answer, the flawed negatives (the scene is perturbed and the answer re-rendered) and the
judge traces used for distillation. A real row of `records.jsonl` and its `scenes.jsonl` twin (seed 0):

    {"id": "world-000001", "image": "images/world-000001.png", "question": "How many triangles are there?",
     "answer": "There is 1 triangle, at the middle right.", "source": "world/count"}
    {"id": "world-000001", "scene": {"width": 112, "height": 112, "shapes": [
       {"kind": "square", "colour": "blue", "size": "small", "x": 18, "y": 56},
       {"kind": "square", "colour": "green", "size": "large", "x": 93, "y": 93},
       {"kind": "triangle", "colour": "blue", "size": "large", "x": 93, "y": 56}], "texts": []},
     "task": {"kind": "count", "params": {"kind": "triangle"}}}

A negative for it is `There are 2 triangles, at the middle right.` (incorrect_reasoning), and the trace
`scene_reasoner` writes for the two as options is

    <think>Image: a large blue triangle at the middle right; 1 triangle. A: says 2 triangles, but it is
    1 triangle, no. B: matches, yes.</think><answer>B</answer>

One idea per module: `scene` (palette, grid, the Scene/Task/WorldItem types), `sampling` (a scene and task
from `(seed, index)`), `rendering` (pixels), `questions` (question, gold answer, answer templates),
`wording` (a scene in words), `negatives` (exact flawed answers), `facts` (an answer as comparable facts),
`styles` (the registry of trace styles), `reasoner` (`scene_reasoner`, `description_reasoner`), `misread` (a
captioner's errors), `reading` (a scene and task read back from words) and `files` (a world on disk).
Everything public is importable from `data_synthesis.world`.
"""

from data_synthesis.world.files import load_world, world_item_from_row, write_world
from data_synthesis.world.misread import Misreading, misread
from data_synthesis.world.negatives import scene_negatives
from data_synthesis.world.questions import make_item, question_answer
from data_synthesis.world.reading import read_description, read_question
from data_synthesis.world.reasoner import HINT_USES, check_hint_use, description_reasoner, scene_reasoner
from data_synthesis.world.rendering import render
from data_synthesis.world.sampling import sample_item
from data_synthesis.world.scene import (
    CELL_SHADES,
    COLOURS,
    GRID,
    RGB,
    SHAPE_KINDS,
    SIZES,
    TASK_KINDS,
    TEXT_COLOURS,
    WORDS,
    Scene,
    Shape,
    Task,
    Text,
    WorldItem,
)
from data_synthesis.world.scene import (
    _cell as _cell,  # the grid cell under a point: training.vision_warmup labels cells with it
)
from data_synthesis.world.styles import REASONER_STYLES, REASONERS, ReasonerStyle, reasoner_style
from data_synthesis.world.wording import describe_scene

__all__ = [
    "CELL_SHADES",
    "COLOURS",
    "GRID",
    "HINT_USES",
    "REASONERS",
    "REASONER_STYLES",
    "RGB",
    "SHAPE_KINDS",
    "SIZES",
    "TASK_KINDS",
    "TEXT_COLOURS",
    "WORDS",
    "ReasonerStyle",
    "Scene",
    "Shape",
    "Task",
    "Text",
    "Misreading",
    "WorldItem",
    "check_hint_use",
    "describe_scene",
    "description_reasoner",
    "load_world",
    "make_item",
    "misread",
    "question_answer",
    "read_description",
    "read_question",
    "reasoner_style",
    "render",
    "sample_item",
    "scene_negatives",
    "scene_reasoner",
    "world_item_from_row",
    "write_world",
]

"""Shared by the rollouts through verl's and OpenRLHF's own code (tests/frameworks/test_verl.py, test_openrlhf.py):
two prompts, each with its picture and N responses carrying the `score=N` the rule judge (`ScoredRuleBackend`)
reads, and what their rewards and judge calls are checked against."""

from __future__ import annotations

import math
import re
import socket
from pathlib import Path

from PIL import Image

N = 4
"""Responses per prompt: the group the judge ranks listwise."""
RED, BLUE = (220, 20, 20), (20, 20, 220)
IMAGES = {"What colour is the picture?": "red.png", "Is the shape round?": "blue.png"}
"""Each prompt's question and its picture (a file in the folder `write_images` fills)."""
RESPONSES = {
    "What colour is the picture?": ["It is red. score=9", "It is blue. score=2", "Green. score=5", "Red! score=7"],
    "Is the shape round?": ["Yes. score=3", "No. score=8", "Maybe. score=1", "Round. score=4"],
}


def write_images(folder: Path) -> Path:
    """`folder` made, with the two pictures in it (one colour each, 28 x 28); returns it."""
    folder.mkdir()
    Image.new("RGB", (28, 28), RED).save(folder / "red.png")
    Image.new("RGB", (28, 28), BLUE).save(folder / "blue.png")
    return folder


def dead_port() -> int:
    """A loopback port nothing listens on: what a SIGKILLed reward server leaves (connections refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def listwise_rewards(responses: list[str]) -> list[float]:
    """What `ScoredRuleBackend` gives these responses judged as one group: the softmax of the `score=N` each
    carries, in their order."""
    scores = [int(re.search(r"score=(\d+)", response).group(1)) for response in responses]
    top = max(scores)
    weights = [math.exp(s - top) for s in scores]
    return [w / sum(weights) for w in weights]


def image_colour(responses: list[str]) -> tuple[int, int, int]:
    """The colour of the picture of the prompt these responses (a whole group, in any order) answer."""
    question = next(q for q, texts in RESPONSES.items() if set(responses) == set(texts))
    return RED if IMAGES[question] == "red.png" else BLUE

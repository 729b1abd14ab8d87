"""Shared fixtures: tiny models built offline once per session, and a trained parrot judge."""

from __future__ import annotations

import random

import pytest
from PIL import Image

from judge.types import MCItem


@pytest.fixture(scope="session")
def tiny_vlm_dir(tmp_path_factory):
    from tiny_world.model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-vlm"), kind="vlm", seed=0)


@pytest.fixture(scope="session")
def tiny_lm_dir(tmp_path_factory):
    from tiny_world.model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-lm"), kind="lm", seed=0)


@pytest.fixture(scope="session")
def parrot_dir(tiny_vlm_dir, tmp_path_factory):
    """A tiny judge trained to answer in the judge format (B ~70 %, A ~30 %), blind to the image."""
    from tests.support.parrot import train_parrot

    return train_parrot(tiny_vlm_dir, tmp_path_factory.mktemp("parrot"))


@pytest.fixture(scope="session")
def parrot_loaded(parrot_dir):
    from judge.models import load_model

    return load_model(str(parrot_dir), device="cpu")


def make_items(n: int, *, seed: int = 0, k_choices=(2, 3)) -> list[MCItem]:
    """`n` MC items with in-memory images and a known label."""
    rng = random.Random(seed)
    colours = ["red", "green", "blue", "yellow", "purple"]
    items = []
    for i in range(n):
        k = rng.choice(k_choices)
        names = rng.sample(colours, k)
        image = Image.new("RGB", (84, 84), {"red": (220, 0, 0), "green": (0, 170, 0)}.get(names[0], (0, 0, 200)))
        items.append(
            MCItem(
                id=f"item-{i}",
                question="What colour is the image?",
                candidates=[f"It is {c}." for c in names],
                image=image,
                label=0,
            )
        )
    return items

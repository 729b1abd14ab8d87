"""A scene as pixels: deterministic drawing, so equal scenes give equal images (and equal PNG bytes)."""

from __future__ import annotations

import functools

from PIL import Image, ImageDraw, ImageFont

from data_synthesis.world.scene import CELL_SHADES, GRID, RGB, Scene


@functools.lru_cache(maxsize=8)
def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    return ImageFont.load_default(size=size)


def render(scene: Scene) -> Image.Image:
    """Draw the scene: same scene, same pixels (no antialiasing randomness, no fonts from the host)."""
    image = Image.new("RGB", (scene.width, scene.height), "white")
    draw = ImageDraw.Draw(image)
    if scene.shaded:
        w, h = scene.width / GRID, scene.height / GRID
        for row in range(GRID):
            for col in range(GRID):
                box = (round(col * w), round(row * h), round((col + 1) * w) - 1, round((row + 1) * h) - 1)
                draw.rectangle(box, fill=CELL_SHADES[row][col])
    cell = min(scene.width, scene.height) / GRID
    for s in scene.shapes:
        r = round(cell * (0.38 if s.size == "large" else 0.2))
        box = (s.x - r, s.y - r, s.x + r, s.y + r)
        if s.kind == "circle":
            draw.ellipse(box, fill=RGB[s.colour])
        elif s.kind == "square":
            draw.rectangle(box, fill=RGB[s.colour])
        else:
            draw.polygon([(s.x, s.y - r), (s.x + r, s.y + r), (s.x - r, s.y + r)], fill=RGB[s.colour])
    for t in scene.texts:  # digits are drawn larger: they are single characters
        size = round(cell * (0.75 if t.text.isdigit() else 0.43))
        draw.text((t.x, t.y), t.text, fill=RGB[t.colour], font=_font(size), anchor="mm")
    return image

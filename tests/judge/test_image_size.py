"""One image-size setting (Qwen's `min_pixels` / `max_pixels`) wherever an image meets a model, and the
token `usage` every verdict carries to show what an image costs.

The model here is the tiny judge with its processor set to Qwen2.5-VL's stock range (3136 to 12,845,056
pixels), so a 1600x1200 photo costs what it costs a real Qwen2.5-VL: 1596x1204 -> 57x43 = 2,451 visual
tokens per call. With `max_pixels = 200_704` (256·28·28) it becomes 504x364 -> 18x13 = 234.
"""

from __future__ import annotations

import json
import logging
import shutil

import httpx
import numpy as np
import pytest
from mrjudge.cli import main
from PIL import Image

from judge.backends.base import ChatRequest, Generation, SamplingParams
from judge.backends.hf import TransformersBackend
from judge.backends.openai_http import OpenAIBackend
from judge.images import fitted_size
from judge.judging import Judge, JudgeConfig
from judge.models import load_model, load_processor, set_pixel_range
from judge.policy_reward import JudgeRewardFunction
from reward_server import ServerConfig, create_app
from reward_server.background import serve_in_thread
from tests.support.scripted_judge import RuleJudgeBackend
from tiny_world.servers.openai_server import make_app
from tiny_world.servers.openai_server import serve as serve_openai

STOCK_MIN_PIXELS = 3136
STOCK_MAX_PIXELS = 12_845_056
"""Qwen/Qwen2.5-VL-7B-Instruct's preprocessor_config.json."""
CAP = 200_704
PHOTO = (1600, 1200)


def visual_tokens(width: int, height: int, **bounds: int) -> int:
    """Tokens Qwen2.5-VL spends on an image: one per 28x28 block of its resized size."""
    w, h = fitted_size(width, height, **bounds)
    return (w // 28) * (h // 28)


def photo(size=PHOTO, seed: int = 0) -> Image.Image:
    """A seeded stand-in photo: smooth gradients plus noise, so it neither compresses away nor repeats."""
    rng = np.random.default_rng(seed)
    w, h = size
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255 / w, y * 255 / h, (x + y) * 127 / (w + h)], axis=-1)
    noise = rng.normal(0, 24, size=(h, w, 3))
    return Image.fromarray(np.clip(base + noise, 0, 255).astype(np.uint8), "RGB")


@pytest.fixture(scope="module")
def stock_judge_dir(tiny_vlm_dir, tmp_path_factory):
    """The tiny judge with the stock Qwen2.5-VL pixel range, written as the hub checkpoint writes it."""
    folder = tmp_path_factory.mktemp("stock-judge")
    shutil.copytree(tiny_vlm_dir, folder, dirs_exist_ok=True)
    path = folder / "processor_config.json"
    config = json.loads(path.read_text())
    image = config["image_processor"]
    image.pop("size")
    image.update(min_pixels=STOCK_MIN_PIXELS, max_pixels=STOCK_MAX_PIXELS)
    path.write_text(json.dumps(config, indent=2))
    size = load_processor(str(folder)).image_processor.size
    assert (size["shortest_edge"], size["longest_edge"]) == (STOCK_MIN_PIXELS, STOCK_MAX_PIXELS)
    return folder


def test_the_figures_in_this_module():
    assert fitted_size(*PHOTO, min_pixels=STOCK_MIN_PIXELS, max_pixels=STOCK_MAX_PIXELS) == (1596, 1204)
    assert visual_tokens(*PHOTO, min_pixels=STOCK_MIN_PIXELS, max_pixels=STOCK_MAX_PIXELS) == 2451
    assert fitted_size(*PHOTO, max_pixels=CAP) == (504, 364) and visual_tokens(*PHOTO, max_pixels=CAP) == 234


# -- the judge command ------------------------------------------------------------------------------------


def test_mrjudge_judge_max_pixels_caps_the_prompt_tokens(stock_judge_dir, tmp_path, capsys):
    """The stock range spends 2,451 visual tokens on the photo per call; `--max-pixels` spends 234."""
    photo().save(tmp_path / "photo.jpg", quality=90)
    items = tmp_path / "items.jsonl"
    row = {"id": "p0", "image": "photo.jpg", "question": "Is it a sunset?", "candidates": ["Yes.", "No."], "label": 0}
    items.write_text(json.dumps(row) + "\n")
    common = ["judge", "--model", str(stock_judge_dir), "--input", str(items), "--orders", "1", "--max-new-tokens", "1"]
    usage = {}
    for name, extra in (("stock", []), ("capped", ["--max-pixels", str(CAP)])):
        out = tmp_path / f"{name}.jsonl"
        assert main([*common, "--output", str(out), *extra]) == 0
        [verdict] = [json.loads(line) for line in out.read_text().splitlines()]
        usage[name] = verdict["usage"]
        assert f"tokens {verdict['usage']['prompt_tokens']:,} prompt" in " ".join(capsys.readouterr().err.split())
    stock = visual_tokens(*PHOTO, min_pixels=STOCK_MIN_PIXELS, max_pixels=STOCK_MAX_PIXELS)
    capped = visual_tokens(*PHOTO, max_pixels=CAP)
    assert usage["stock"]["prompt_tokens"] - usage["capped"]["prompt_tokens"] == stock - capped  # one call each
    assert capped < usage["capped"]["prompt_tokens"] < capped + 300  # the image, the question and the template
    assert usage["stock"]["completion_tokens"] == usage["capped"]["completion_tokens"] == 1


def test_a_bad_pixel_flag_is_refused_naming_it(tiny_vlm_dir, tmp_path, capsys):
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"id": 1, "question": "q", "candidates": ["a", "b"]}) + "\n")
    args = ["judge", "--model", str(tiny_vlm_dir), "--input", str(items), "--output", str(tmp_path / "v.jsonl")]
    with pytest.raises(SystemExit, match=r"max_pixels \(100\) must be an integer of at least 784"):
        main([*args, "--max-pixels", "100"])
    with pytest.raises(SystemExit, match=r"min_pixels \(50176\) must not exceed max_pixels \(3136\)"):
        main([*args, "--min-pixels", "50176", "--max-pixels", "3136"])


@pytest.mark.parametrize(
    "fields, match",
    [
        ({"max_pixels": 0}, r"max_pixels \(0\) must be an integer of at least 784"),
        ({"min_pixels": 1.5e5}, r"min_pixels \(150000.0\) must be an integer"),  # YAML's 1.5e5 is a float
        ({"min_pixels": 10_000, "max_pixels": 5_000}, r"must not exceed"),
    ],
)
def test_judge_config_refuses_ranges_qwen_cannot_meet(fields, match):
    with pytest.raises(ValueError, match=match):
        JudgeConfig(**fields)


# -- each backend -----------------------------------------------------------------------------------------


def _request(image: Image.Image) -> ChatRequest:
    return ChatRequest.user("Describe the picture.", [image])


def test_hf_backend_sets_the_processor_range_and_counts_tokens(stock_judge_dir):
    backend = TransformersBackend(str(stock_judge_dir), device="cpu", max_pixels=CAP)
    size = backend.loaded.processor.image_processor.size
    assert (size["shortest_edge"], size["longest_edge"]) == (STOCK_MIN_PIXELS, CAP)  # the unset bound is kept
    [small] = backend.generate([_request(Image.new("RGB", (56, 56)))], SamplingParams(max_new_tokens=3))
    [large] = backend.generate([_request(photo())], SamplingParams(max_new_tokens=3))
    assert large.prompt_tokens - small.prompt_tokens == visual_tokens(*PHOTO, max_pixels=CAP) - 4  # 56x56: 4 tokens
    assert 1 <= large.completion_tokens <= 3


def test_openai_backend_resizes_before_sending(stock_judge_dir):
    """Over HTTP the server's own processor has the stock range: only the client's resize keeps the photo small."""
    loaded = load_model(str(stock_judge_dir), device="cpu")
    local = TransformersBackend(load_model(str(stock_judge_dir), device="cpu"), max_pixels=CAP)
    params = SamplingParams(max_new_tokens=3)
    [expected] = local.generate([_request(photo())], params)
    with serve_openai(make_app(loaded)) as url:
        [sent] = OpenAIBackend(url, max_pixels=CAP, top_logprobs=0).generate([_request(photo())], params)
    assert sent.prompt_tokens == expected.prompt_tokens  # the server's processor saw the 504x364 image
    assert sent.completion_tokens > 0


def test_set_pixel_range_is_for_qwen_style_processors(tiny_lm_dir, tiny_vlm_dir):
    tokenizer = load_processor(str(tiny_lm_dir))
    assert set_pixel_range(tokenizer, max_pixels=CAP) is tokenizer  # text-only: nothing to resize

    class SquareSizes:
        size = {"height": 224, "width": 224}

    class Other:
        image_processor = SquareSizes()

    with pytest.raises(ValueError, match=r"Qwen-VL image sizes, but this model's SquareSizes sizes images as"):
        set_pixel_range(Other(), max_pixels=CAP)
    processor = load_processor(str(tiny_vlm_dir))  # tiny: 3136 to 12544
    with pytest.raises(ValueError, match=r"range \[50176, 12544\] is empty"):
        set_pixel_range(processor, min_pixels=50_176)


# -- the reward server and the reward client ---------------------------------------------------------------


class RecordingRuleBackend(RuleJudgeBackend):
    """The rule judge, noting the size of every image it is sent and reporting made-up token counts."""

    def __init__(self) -> None:
        super().__init__()
        self.image_sizes: list[tuple[int, int]] = []

    def generate(self, requests, params):
        self.image_sizes += [image.size for request in requests for image in request.images]
        out = super().generate(requests, params)
        return [Generation(g.text, g.label_logprobs, prompt_tokens=100, completion_tokens=7) for g in out]


def test_reward_client_resizes_images_the_server_would_refuse(caplog):
    """`mrjudge serve`'s app with a 1 MiB image limit: the photo's ~5 MB PNG is a 413 unless the client shrinks it."""
    backend = RecordingRuleBackend()
    app = create_app(Judge(backend, JudgeConfig(orders=2)), ServerConfig(max_image_bytes=2**20))
    picture = photo()
    prompts = ["Describe the photo."] * 2
    completions = ["A sunset. score=1", "A beach. score=3"]
    with serve_in_thread(app) as root:
        plain = JudgeRewardFunction(root, max_retries=0)
        with caplog.at_level(logging.WARNING, logger="judge.policy_reward"):
            assert plain(prompts, completions, images=[[picture]] * 2) == [None, None]
        assert "HTTP 413 (field 'images[0]')" in caplog.text and "max_image_bytes" in caplog.text
        assert backend.image_sizes == []

        resized = JudgeRewardFunction(root, max_retries=0, max_pixels=CAP)
        rewards = resized(prompts, completions, images=[[picture]] * 2)
        assert rewards[1] > rewards[0]  # the rule judge prefers score=3
        assert set(backend.image_sizes) == {fitted_size(*PHOTO, max_pixels=CAP)}

        small = Image.new("RGB", (64, 48), (10, 200, 30))  # already inside the range: sent as it is
        resized(prompts, completions, images=[[small]] * 2)
        assert backend.image_sizes[-1] == (64, 48)

        body = {"items": [{"id": "x", "question": "q", "candidates": ["a score=1", "b score=2"]}]}
        [verdict] = httpx.post(f"{root}/v1/judge", json=body, timeout=30).json()["verdicts"]
        assert verdict["usage"] == {"prompt_tokens": 200, "completion_tokens": 14}  # two display orders


# -- the other commands take the same flags ----------------------------------------------------------------

EVAL_COMMANDS = [
    ["eval", "vl-rewardbench", "--data", "test.parquet"],
    ["eval", "multimodal-rewardbench", "--data", "all_data.json"],
    ["eval", "mm-vet", "--data", "mm-vet.json", "--candidates", "a.json", "--grader-url", "http://grader/v1"],
]


@pytest.mark.parametrize("command", EVAL_COMMANDS, ids=lambda c: c[1])
def test_every_eval_command_gives_the_range_to_the_judge_and_its_model(command):
    from mrjudge import eval_cmd
    from mrjudge.cli import build_parser

    args = build_parser().parse_args([*command, "--model", "m", "--out", "o", "--max-pixels", str(CAP)])
    assert eval_cmd.judge_config_from(args).max_pixels == CAP  # MC mode: the judge resizes
    assert eval_cmd.judge_model_spec(args).options == {"max_pixels": CAP}  # the backend (official mode, policy)


def test_serve_and_synth_take_the_flags():
    from mrjudge import synth_cmd
    from mrjudge.cli import build_parser
    from mrjudge.engine_flags import pixel_options
    from mrjudge.judge_cmd import judge_config_from

    parser = build_parser()
    serve = parser.parse_args(["serve", "--model", "m", "--max-pixels", str(CAP), "--min-pixels", "3136"])
    assert judge_config_from(serve).pixel_options() == {"min_pixels": 3136, "max_pixels": CAP}
    for stage in ("negatives", "describe"):
        args = parser.parse_args(
            ["synth", stage, "--input", "i", "--out", "o", "--model", "http://mllm/v1", "--max-pixels", str(CAP)]
        )
        spec = synth_cmd._spec(args.model, args.backend, pixel_options(args))
        assert spec.options == {"max_pixels": CAP}
        assert spec.build().pixels == {"max_pixels": CAP}  # the HTTP backend resizes before sending

"""One image-size setting (Qwen's `min_pixels` / `max_pixels`) wherever an image meets a model, and the
token `usage` every verdict carries to show what an image costs.

The model here is the tiny judge with its processor set to Qwen2.5-VL's stock range (3136 to 12,845,056
pixels), so a 1600x1200 photo costs what it costs a real Qwen2.5-VL: 1596x1204 -> 57x43 = 2,451 visual
tokens per call. With `max_pixels = 200_704` (256·28·28) it becomes 504x364 -> 18x13 = 234.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import shutil
import sys

import httpx
import pytest
from mrjudge.cli import main
from PIL import Image

from judge import images
from judge.backends.base import ChatRequest, Generation, SamplingParams
from judge.backends.hf import TransformersBackend
from judge.backends.openai_http import OpenAIBackend
from judge.images import PixelRange, fit_pixels, fitted_size, open_header
from judge.judging import Judge, JudgeConfig
from judge.models import load_model, load_processor, set_pixel_range
from judge.reward.scoring import RewardRequest, compute_rewards
from judge.reward.trl.http import HttpJudgeReward
from judge.reward.wire import RewardRefused
from judge.types import MCItem
from reward_server import ServerConfig, create_app
from reward_server.background import serve_in_thread
from tests.support.images import CAP, PHOTO, photo, visual_tokens
from tiny_world.rule_judge import RuleJudgeBackend
from tiny_world.servers.openai_server import make_app
from tiny_world.servers.openai_server import serve as serve_openai

STOCK_MIN_PIXELS = 3136
STOCK_MAX_PIXELS = 12_845_056
"""Qwen/Qwen2.5-VL-7B-Instruct's preprocessor_config.json."""


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
    assert main([*args, "--max-pixels", "100"]) == 2
    assert "max_pixels (100) must be an integer of at least 784" in capsys.readouterr().err
    assert main([*args, "--min-pixels", "50176", "--max-pixels", "3136"]) == 2
    assert "min_pixels (50176) must not exceed max_pixels (3136)" in capsys.readouterr().err


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


@pytest.mark.parametrize(
    "make",
    [PixelRange, JudgeConfig, lambda **kw: OpenAIBackend("http://judge/v1", **kw),
     lambda **kw: TransformersBackend("no/such/model", **kw)],  # refused before any model is loaded
    ids=["range", "judge-config", "openai", "hf"],
)  # fmt: skip
def test_every_holder_of_the_range_refuses_it_the_same_way(make):
    with pytest.raises(ValueError, match=r"^max_pixels \(100\) must be an integer of at least 784"):
        make(max_pixels=100)


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
        plain = HttpJudgeReward(root, retry={"max_retries": 0})
        with caplog.at_level(logging.WARNING, logger="judge.reward"):
            with pytest.raises(RewardRefused, match=r"HTTP 413 \(field 'images\[0\]'\).*max_image_bytes"):
                plain(prompts, completions, images=[[picture]] * 2)  # refused input raises (issue 37), never None
        assert "HTTP 413 (field 'images[0]')" in caplog.text and "max_image_bytes" in caplog.text
        assert backend.image_sizes == []

        resized = HttpJudgeReward(root, retry={"max_retries": 0}, max_pixels=CAP)
        rewards = resized(prompts, completions, images=[[picture]] * 2)
        assert rewards[1] > rewards[0]  # the rule judge prefers score=3
        assert set(backend.image_sizes) == {fitted_size(*PHOTO, max_pixels=CAP)}

        small = Image.new("RGB", (64, 48), (10, 200, 30))  # already inside the range: sent as it is
        resized(prompts, completions, images=[[small]] * 2)
        assert backend.image_sizes[-1] == (64, 48)

        body = {"items": [{"id": "x", "question": "q", "candidates": ["a score=1", "b score=2"]}]}
        [verdict] = httpx.post(f"{root}/v1/judge", json=body, timeout=30).json()["verdicts"]
        assert verdict["usage"] == {"prompt_tokens": 200, "completion_tokens": 14}  # two display orders


# -- one resize per image, where it enters the judge --------------------------------------------------------


@pytest.fixture
def resizes(monkeypatch) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """(size in, size out) of every `fit_pixels` call, under whichever name a module imported it."""
    calls: list[tuple[tuple[int, int], tuple[int, int]]] = []
    original = images.fit_pixels

    def counted(image, **bounds):
        size = image.size
        fitted = original(image, **bounds)
        calls.append((size, fitted.size))
        return fitted

    for module in list(sys.modules.values()):
        if getattr(module, "__dict__", {}).get("fit_pixels") is original:
            monkeypatch.setattr(module, "fit_pixels", counted)
    return calls


def _jpeg_url(image: Image.Image) -> str:
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=90)
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode()


def test_one_resize_per_image_in_process_and_through_the_server(stock_judge_dir, tmp_path, resizes):
    """`mrjudge judge --model URL --max-pixels N` and `mrjudge serve` around that judge: the photo is resized
    once, by the judge or by the server's decode; the display orders share it and the HTTP backend sends it
    as it is (before, the judge re-fitted the decoded image and the backend each request's)."""
    photo().save(tmp_path / "photo.jpg", quality=90)
    row = {"id": "p", "question": "Is it a sunset?", "candidates": ["Yes.", "No."]}
    with serve_openai(make_app(load_model(str(stock_judge_dir), device="cpu"))) as url:
        backend = OpenAIBackend(url, max_pixels=CAP, top_logprobs=0)  # the commands give both the range
        judge = Judge(backend, JudgeConfig(orders=2, max_new_tokens=1, max_pixels=CAP), image_root=tmp_path)
        [local] = judge.select([MCItem(**row, image="photo.jpg")])
        assert resizes == [(PHOTO, (504, 364))]

        resizes.clear()
        with serve_in_thread(create_app(judge, ServerConfig())) as root:
            body = {"items": [{**row, "image": _jpeg_url(photo())}]}
            response = httpx.post(f"{root}/v1/judge", json=body, timeout=120)
        assert response.status_code == 200, response.text
        assert resizes == [(PHOTO, (504, 364))]  # as it was decoded
    [served] = response.json()["verdicts"]
    assert served["usage"] == local.usage  # the model read a 504x364 image both ways, in two calls each


def test_a_tournament_and_a_ranking_resize_their_image_once(resizes):
    """The reward with the judge in this process (`compute_rewards`, TRL's in-process reward): a knock-out over
    four responses is three games in two rounds, and they share one resized image; so do `rank`'s rounds."""
    backend = RecordingRuleBackend()
    judge = Judge(backend, JudgeConfig(orders=2, max_pixels=CAP))
    responses = [f"A photo. score={s}" for s in (1, 4, 2, 3)]
    request = RewardRequest("Describe it.", responses, images=[photo()], mode="tournament", tournament="knockout")
    [result] = compute_rewards(judge, [request])
    assert None not in result.rewards and max(result.rewards) == result.rewards[1]
    assert resizes == [(PHOTO, (504, 364))]
    assert backend.image_sizes == [(504, 364)] * 3 * 2  # three games, two display orders each

    resizes.clear()
    [order] = judge.rank([MCItem(id="r", question="Q?", candidates=responses, image=photo())])
    assert order == [1, 3, 2, 0] and resizes == [(PHOTO, (504, 364))]


@pytest.mark.parametrize(
    "size, bounds, fitted",
    [
        (PHOTO, {"max_pixels": CAP}, (504, 364)),  # shrunk as it is decoded
        ((56, 56), {"min_pixels": 50_176}, (224, 224)),  # enlarged after decoding
        ((64, 48), {"max_pixels": CAP}, (64, 48)),  # inside the range: decoded, not resampled
    ],
)
def test_fit_pixels_decodes_an_opened_image_to_the_same_size(size, bounds, fitted):
    """The server's decode is the same resize as the judge's: an opened (header-only) grey PNG comes back
    decoded, RGB and at the size a decoded image gets."""
    buffer = io.BytesIO()
    Image.new("L", size, 90).save(buffer, "PNG")
    opened = open_header(buffer.getvalue())
    out = fit_pixels(opened, **bounds)
    assert (out.mode, out.size) == ("RGB", fitted) == ("RGB", fit_pixels(Image.new("RGB", size), **bounds).size)
    assert out.getpixel((0, 0)) == (90, 90, 90)


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
    from mrjudge.engine_flags import pixel_options
    from mrjudge.model_flags import model_spec

    args = build_parser().parse_args([*command, "--model", "m", "--out", "o", "--max-pixels", str(CAP)])
    assert eval_cmd.judge_config_from(args, eval_cmd.EVAL_JUDGE_FLAGS).max_pixels == CAP  # MC mode: the judge resizes
    assert model_spec(args, pixel_options(args)).options == {"max_pixels": CAP}  # the backend (official mode, policy)


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
        assert spec.build().pixels == PixelRange(max_pixels=CAP)  # the HTTP backend resizes before sending

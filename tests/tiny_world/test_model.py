"""Tiny models: built offline, loadable through the Auto classes, byte-identical for a seed."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tiny_world.model import build_tiny_model


def _files(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.mark.parametrize("kind", ["vlm", "lm"])
def test_same_seed_same_bytes(tmp_path, kind):
    a = _files(build_tiny_model(tmp_path / "a", kind=kind, seed=3))
    b = _files(build_tiny_model(tmp_path / "b", kind=kind, seed=3))
    c = _files(build_tiny_model(tmp_path / "c", kind=kind, seed=4))
    assert a == b
    assert a["model.safetensors"] != c["model.safetensors"]


def test_auto_classes_give_a_real_processor_and_model(tiny_vlm_dir):
    # A fresh interpreter, so nothing this test session imported helps: one documented import, then Auto*.
    code = textwrap.dedent(
        f"""
        import judge.backends.hf_compat  # the one documented import (image-only Qwen2.5-VL processor)
        from transformers import AutoModelForImageTextToText, AutoProcessor
        from transformers.processing_utils import ProcessorMixin
        processor = AutoProcessor.from_pretrained({str(tiny_vlm_dir)!r})
        assert isinstance(processor, ProcessorMixin), type(processor)
        assert processor.image_processor is not None and processor.tokenizer is not None
        model = AutoModelForImageTextToText.from_pretrained({str(tiny_vlm_dir)!r})
        print(type(processor).__name__, type(model).__name__)
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "Qwen2_5_VLForConditionalGeneration" in result.stdout


def test_processor_runs_the_chat_template_with_an_image(tiny_vlm_dir):
    from PIL import Image

    from judge.models import load_model
    from judge.prompt import build_messages

    loaded = load_model(str(tiny_vlm_dir), device="cpu")
    messages = build_messages("What colour?", ["red", "blue"])
    text = loaded.processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text.startswith(
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n<|vision_start|>"
    )
    assert text.endswith("<|im_start|>assistant\n")
    enc = loaded.processor(text=[text], images=[Image.new("RGB", (84, 84))], return_tensors="pt")
    n_image_tokens = int((enc["input_ids"] == loaded.model.config.image_token_id).sum())
    assert n_image_tokens == 9  # 84x84 → 6x6 patches of 14 px → 3x3 after the 2x2 merge
    assert loaded.model(**enc).logits.shape[-1] == loaded.model.config.text_config.vocab_size


def test_text_only_lm(tiny_lm_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_lm_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_lm_dir)
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") == model.generation_config.eos_token_id


def test_small_is_bigger(tmp_path):
    from safetensors import safe_open

    def n_params(folder):
        with safe_open(str(folder / "model.safetensors"), "pt") as f:
            return sum(_prod(f.get_slice(k).get_shape()) for k in f.keys())

    tiny = n_params(build_tiny_model(tmp_path / "t", size="tiny"))
    small = n_params(build_tiny_model(tmp_path / "s", size="small"))
    assert small > 2 * tiny


def _prod(shape):
    out = 1
    for dim in shape:
        out *= dim
    return out


def test_bad_arguments():
    with pytest.raises(ValueError, match="kind"):
        build_tiny_model("/tmp/never", kind="audio")
    with pytest.raises(ValueError, match="size"):
        build_tiny_model("/tmp/never", size="huge")


def test_trained_sizes_know_the_scene_words():
    from tiny_world.model import TINY_SIZES, build_tokenizer

    plain, scene = build_tokenizer(seed=0), build_tokenizer(seed=0, scene_words=True)
    text = "<think>Image: a large blue triangle at the middle right. A: matches, yes.</think>"
    assert len(scene.tokenize(text)) < 0.8 * len(plain.tokenize(text))
    assert scene.tokenize(" middle") == ["Ġmiddle"] and len(plain.tokenize(" middle")) > 1
    assert TINY_SIZES["small"].scene_words and not TINY_SIZES["tiny"].scene_words


def test_the_factory_marks_its_model_untrained(tiny_lm_dir):
    """The folder says its weights are random, so a judge loading it can say its verdicts will not parse."""
    import json

    from judge.models import UNTRAINED_MARKER, untrained_marker

    marker = json.loads((tiny_lm_dir / UNTRAINED_MARKER).read_text())
    assert marker["untrained"] is True and (marker["kind"], marker["size"], marker["seed"]) == ("lm", "tiny", 0)
    assert untrained_marker(tiny_lm_dir) == marker  # it matches the weights written

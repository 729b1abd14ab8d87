"""Tiny Qwen2.5-VL judges (and text-only Qwen LMs) built offline, from a config, in a second or two.

Tests, CI and the demo never download a model: they build one here. The folder written by
`build_tiny_model` looks like a real Qwen checkpoint — `config.json`, `model.safetensors`, a byte-level BPE
tokenizer trained locally with the Qwen pre-tokenizer and special tokens, a Qwen-style chat template, and
(for the VLM) the Qwen2-VL image processor — so every code path that loads a hub model loads it too:

    from tiny_world.model import build_tiny_model
    path = build_tiny_model("/tmp/tiny-judge", kind="vlm", seed=0)
    import judge.backends.hf_compat  # only needed where torchvision does not import (CPU-only machines)
    processor = AutoProcessor.from_pretrained(path)
    model = AutoModelForImageTextToText.from_pretrained(path)

The weights are a random initialisation, and the folder says so: `judge.models.UNTRAINED_MARKER` (with the
weights' SHA-256) makes the backends warn when it is loaded to judge, since its verdicts will not parse. The
demo (`mrjudge demo`) trains one into a judge (`runs/demo/grpo/model`).

The same seed gives byte-identical weights and tokenizer files. Sizes:
- `tiny`  (~1.6 MB of weights): hidden 64, 2 layers, vision depth 2 — for plumbing tests.
- `small` (~6.3 MB): hidden 128, 4 layers, vision hidden 128 — sized to learn simple visual questions on a CPU in
  minutes (the training issues use it).
- `medium` (~14 MB): the `small` vision tower under a 256-wide, 8-head text side — more room for the copy and
  compare steps of a judge's reasoning.
- `tiny32` (~1.5 MB): `tiny` with two 32-wide attention heads (one KV head) — the smallest shape vLLM's CPU
  attention kernels accept (head_dim >= 32; `tiny`'s 16-wide heads are refused), for the vLLM tests.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from judge.models import mark_untrained
from judge.prompt import COMPACT_PROMPT, DEFAULT_CRITERIA, DEFAULT_INSTRUCTION, option_letters

__all__ = ["QWEN_SPECIAL_TOKENS", "TinySize", "TINY_SIZES", "build_tiny_model", "build_tokenizer"]

ModelKind = Literal["vlm", "lm"]

# The Qwen2.5 special tokens, in Qwen's order, so prompts built for real checkpoints mean the same here.
QWEN_SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)

# Qwen2-VL's chat template, reduced to what a judge needs: string or list content, image parts in any of
# the common spellings, the default system prompt, and the generation prompt.
QWEN_CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if loop.first and message['role'] != 'system' -%}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string -%}{{ message['content'] }}"
    "{%- else -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] in ('image', 'image_url') or 'image' in part -%}"
    "{{ '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- elif part['type'] == 'text' -%}{{ part['text'] }}"
    "{%- endif -%}{%- endfor -%}{%- endif -%}"
    "{{ '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)


@dataclass(frozen=True)
class TinySize:
    """Shape of a tiny model. `head_dim` = hidden / heads, and `mrope_section` must sum to head_dim / 2."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vision_hidden: int
    vision_depth: int
    vision_heads: int
    vocab: int
    mrope_section: tuple[int, int, int]
    rope_theta: float = 1_000_000.0
    """RoPE base (Qwen's). M-RoPE hands its frequency bands out in order: time, then image rows, then image
    columns, so at Qwen's sections and base rows turn by under 0.03 rad and columns by under 0.0002 rad per
    image token. Two changes meant to make positions visible were tried on the learning benchmark, one seed
    each, and neither is kept: a base of 10 (0.715 against 0.74 held-out); and sections (1, 1, 14) at base
    1e4 (rows 0.56 rad, columns 0.32 rad per token, text RoPE still plain), which judged 0.765 against
    0.70 after 800 SFT steps but placed objects worse when describing pictures (0.68 against 0.79 of
    objects in the right cell), so the presets keep Qwen's values."""
    scene_words: bool = False
    """Train the tokenizer on the synthetic world's words and the compact judge prompt too, so that they
    are whole tokens as in a real tokenizer ("middle" is one token, not five): a judge example is about 150
    tokens instead of 196, and SFT steps are that much cheaper. On for the sizes that are trained."""


TINY_SIZES: dict[str, TinySize] = {
    "tiny": TinySize(64, 2, 4, 2, 128, 64, 2, 4, 2048, (2, 3, 3)),
    "small": TinySize(128, 4, 4, 2, 256, 128, 2, 4, 2048, (4, 6, 6), scene_words=True),
    "medium": TinySize(256, 4, 8, 4, 512, 128, 2, 4, 2048, (4, 6, 6), scene_words=True),
    "tiny32": TinySize(64, 2, 2, 1, 128, 64, 2, 4, 2048, (4, 6, 6)),
}

# Image sizes the tiny processor keeps (pixels): an 84x84 picture becomes 9 image tokens, and nothing
# becomes more than 16, so CPU steps stay in the tens of milliseconds.
TINY_MIN_PIXELS = 56 * 56
TINY_MAX_PIXELS = 112 * 112

_COLOURS = "red green blue yellow purple orange black white gray brown pink cyan".split()
_SHAPES = "circle square triangle star rectangle ellipse cross diamond".split()
_WORDS = (
    "the a an is are there of in on at left right above below top bottom next to how many what which "
    "colour color shape number text word image picture question answer candidate option best correct "
    "wrong because so it shows one two three four five six seven eight nine ten zero yes no and or not "
    "count total sum plus minus equals written reads says large small big tiny near far between"
).split()
_AFTER_BOTTOM = _WORDS.index("bottom") + 1
_SCENE_VOCABULARY = [
    *_WORDS[:_AFTER_BOTTOM],
    *"middle centre center".split(),
    *_WORDS[_AFTER_BOTTOM:],
    *"matches but leaves out adds none closest right worded differently check each against then every has corners".split(),
]
"""`_WORDS` with the words of scene answers and verdicts (`TinySize.scene_words`)."""
_PLACES = [f"{row} {col}" for row in ("top", "middle", "bottom") for col in ("left", "centre", "right")]


def _tokenizer_corpus(seed: int, scene_words: bool = False) -> list[str]:
    """Text the tokenizer learns its merges from: judge prompts, answers and scene vocabulary."""
    rng = random.Random(seed)
    lines = [DEFAULT_INSTRUCTION, DEFAULT_CRITERIA]
    if scene_words:
        lines += [COMPACT_PROMPT.instruction, COMPACT_PROMPT.answer_format]
        lines += ["<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"] * 20
    vocabulary = _SCENE_VOCABULARY if scene_words else _WORDS
    for _ in range(3000):
        colour, shape = rng.choice(_COLOURS), rng.choice(_SHAPES)
        k = rng.randint(2, 4)
        letter = rng.choice(option_letters(k))
        words = " ".join(rng.choice(vocabulary) for _ in range(rng.randint(3, 10)))
        lines.append(f"Question: What colour is the {shape}?\nA. {colour}\nB. {rng.choice(_COLOURS)}")
        lines.append(f"There are {rng.randint(0, 12)} {shape}s. {words}. {rng.randint(0, 99)} + {rng.randint(0, 99)}")
        lines.append(f"<think>Image: a {colour} {shape}. {letter}: {words}, yes.</think><answer>{letter}</answer>")
        lines.append(f"Answer: {letter}. The best answer is {letter}. \\boxed{{{letter}}}")
        lines.append(f"Overall Judgment: Answer {rng.randint(1, 2)} is better.")
        if not scene_words:
            continue
        # Scene answers and verdicts, so that the words pictures are described with are whole tokens, as in
        # a real tokenizer ("middle" as one token, not five): shorter prompts, and whole words to copy.
        place, size = rng.choice(_PLACES), rng.choice(("small", "large"))
        lines.append(
            f"Candidates:\nA. The {shape} at the {place} is {colour}.\nB. There are {k} {shape}s, at the {place}."
        )
        lines.append(f"Is the {shape} to the left or to the right of the {rng.choice(_SHAPES)}? Check each candidate.")
        lines.append(f"<think>Image: a {size} {colour} {shape} at the {place}. {letter}: matches, yes.</think>")
        lines.append(f"{letter}: says {place}, but it is {rng.choice(_PLACES)}, no. {letter}: leaves out {colour}, no.")
    return lines


def build_tokenizer(vocab_size: int = 2048, seed: int = 0, *, scene_words: bool = False):
    """Train a byte-level BPE with Qwen's pre-tokenizer and wrap it as a `Qwen2Tokenizer`
    (`scene_words`: see `TinySize.scene_words`)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import Qwen2Tokenizer
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    bpe = Tokenizer(models.BPE())
    bpe.normalizer = normalizers.NFC()
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(QWEN_SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(_tokenizer_corpus(seed, scene_words), trainer=trainer)
    state = json.loads(bpe.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in state["merges"]]
    tokenizer = Qwen2Tokenizer(
        vocab=state["vocab"],
        merges=merges,
        unk_token=None,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        errors="replace",
    )
    tokenizer.add_special_tokens({"additional_special_tokens": list(QWEN_SPECIAL_TOKENS[1:])})
    tokenizer.add_special_tokens({"pad_token": "<|endoftext|>"})
    tokenizer.chat_template = QWEN_CHAT_TEMPLATE
    return tokenizer


def qwen_text_shape(
    hidden: int, layers: int, heads: int, kv_heads: int, intermediate: int, vocab: int, max_positions: int = 4096
) -> dict[str, int]:
    """A Qwen text stack's shape under transformers' config names: the tiny models' and the benchmarks' sizes."""
    return {
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "max_position_embeddings": max_positions,
    }


def _text_kwargs(size: TinySize, vocab: int, tokenizer) -> dict:
    return dict(
        **qwen_text_shape(size.hidden, size.layers, size.heads, size.kv_heads, size.intermediate, vocab),
        rms_norm_eps=1e-6,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
    )


def _vlm_config(size: TinySize, vocab: int, tokenizer):
    from transformers import Qwen2_5_VLConfig

    text = _text_kwargs(size, vocab, tokenizer)
    text["rope_parameters"] = {
        "rope_type": "default",
        "rope_theta": size.rope_theta,
        "mrope_section": list(size.mrope_section),
    }
    return Qwen2_5_VLConfig(
        text_config=text,
        vision_config=dict(
            depth=size.vision_depth,
            hidden_size=size.vision_hidden,
            intermediate_size=2 * size.vision_hidden,
            num_heads=size.vision_heads,
            out_hidden_size=size.hidden,
            patch_size=14,
            spatial_merge_size=2,
            temporal_patch_size=2,
            window_size=112,
            fullatt_block_indexes=[size.vision_depth - 1],
        ),
        image_token_id=tokenizer.convert_tokens_to_ids("<|image_pad|>"),
        video_token_id=tokenizer.convert_tokens_to_ids("<|video_pad|>"),
        vision_start_token_id=tokenizer.convert_tokens_to_ids("<|vision_start|>"),
        vision_end_token_id=tokenizer.convert_tokens_to_ids("<|vision_end|>"),
        tie_word_embeddings=False,
    )


def _lm_config(size: TinySize, vocab: int, tokenizer):
    from transformers import Qwen2Config

    return Qwen2Config(**_text_kwargs(size, vocab, tokenizer), rope_theta=1_000_000.0, tie_word_embeddings=False)


def build_tiny_model(
    out: str | Path,
    *,
    kind: ModelKind = "vlm",
    seed: int = 0,
    size: str = "tiny",
) -> Path:
    """Write a randomly initialised tiny Qwen model (weights, tokenizer, processor) to `out`.

    Args:
        out: folder to write; created if missing, files in it are overwritten.
        kind: "vlm" for a Qwen2.5-VL judge (image + text), "lm" for a text-only Qwen2 causal LM.
        seed: seeds the tokenizer corpus and the weights; the same seed writes the same bytes.
        size: a key of `TINY_SIZES` ("tiny", "small", "medium" or "tiny32").

    Returns:
        The folder, ready for `from_pretrained`, marked untrained (`judge.models.mark_untrained`).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    if kind not in ("vlm", "lm"):
        raise ValueError(f"kind must be 'vlm' or 'lm', got {kind!r}")
    if size not in TINY_SIZES:
        raise ValueError(f"size must be one of {sorted(TINY_SIZES)}, got {size!r}")
    spec = TINY_SIZES[size]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)

    tokenizer = build_tokenizer(spec.vocab, seed=seed, scene_words=spec.scene_words)
    vocab = -(-len(tokenizer) // 64) * 64  # round up, as real checkpoints pad the embedding
    config = _vlm_config(spec, vocab, tokenizer) if kind == "vlm" else _lm_config(spec, vocab, tokenizer)

    torch.manual_seed(seed)
    with torch.device("cpu"):
        if kind == "vlm":
            model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
        else:
            model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config.pad_token_id = config.get_text_config().pad_token_id
    model.generation_config.eos_token_id = config.get_text_config().eos_token_id
    model.generation_config.do_sample = False
    model.save_pretrained(out)

    if kind == "vlm":
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

        from judge.backends.hf_compat import ImageOnlyQwen2_5_VLProcessor

        image_processor = Qwen2VLImageProcessorPil(
            min_pixels=TINY_MIN_PIXELS, max_pixels=TINY_MAX_PIXELS, patch_size=14, merge_size=2, temporal_patch_size=2
        )
        processor = ImageOnlyQwen2_5_VLProcessor(
            image_processor=image_processor, tokenizer=tokenizer, chat_template=QWEN_CHAT_TEMPLATE
        )
        processor.save_pretrained(out)
    else:
        tokenizer.save_pretrained(out)
    mark_untrained(out, source="tiny_world.model.build_tiny_model", kind=kind, size=size, seed=seed)
    return out

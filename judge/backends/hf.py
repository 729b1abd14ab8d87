"""The transformers backend: one batched, left-padded `generate` per batch, with option log-probs.

Option log-probs are recorded *during* generation by a logits processor that keeps, at every step, the
log-softmax of the raw logits for the few vocabulary entries that read as an option label (`A`, ` B`,
`>C`, `(2`, …). Keeping all logits (`output_logits=True`) would cost steps × batch × vocabulary floats —
gigabytes for a 150k-token vocabulary — while these rows are a few hundred floats per step.
"""

from __future__ import annotations

import string
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

from judge.backends.base import ChatRequest, Generation, SamplingParams, answer_label_logprobs
from judge.images import PixelRange
from judge.models import LoadedModel, load_model, set_pixel_range

__all__ = ["TransformersBackend"]

_LABEL_CHARS = set(string.ascii_uppercase + "123456789")
_MAX_HEAD = 3  # at most this many non-alphanumeric characters glued before a label in one token
_VISION_PARTS = {"visual", "vision_tower", "vision_model", "vision_encoder", "image_encoder"}
"""Module names of VLMs' vision towers (Qwen-VL's `visual`, LLaVA's `vision_tower`, …)."""


def _label_token_ids(tokenizer: Any) -> tuple[list[int], list[str]]:
    """Vocabulary entries that decode to a short non-alphanumeric head followed by one label character."""
    vocab_size = len(tokenizer)
    texts = tokenizer.batch_decode([[i] for i in range(vocab_size)])
    ids, pieces = [], []
    for token_id, text in enumerate(texts):
        core = text.strip()
        if 1 <= len(core) <= _MAX_HEAD + 1 and core[-1] in _LABEL_CHARS and not any(c.isalnum() for c in core[:-1]):
            ids.append(token_id)
            pieces.append(text)
    return ids, pieces


def _scaling_key(config: Any) -> tuple:
    """What, besides the tensors, decides a LoRA slot's output: equal keys, equal scaling and variant."""
    fields = ("r", "lora_alpha", "use_rslora", "rank_pattern", "alpha_pattern", "use_dora", "lora_bias")
    return tuple(repr(getattr(config, name, None)) for name in fields)


class _LabelLogprobRecorder:
    """A logits processor that records label-token log-probs per step and leaves the scores unchanged."""

    def __init__(self, token_ids: Any) -> None:
        self.token_ids = token_ids
        self.steps: list[Any] = []

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        self.steps.append(torch.log_softmax(scores.float(), dim=-1)[:, self.token_ids].cpu())
        return scores


class TransformersBackend:
    """Generate with a local transformers model (VLM or text-only).

    Args:
        model: a folder / hub id, a PEFT adapter folder (merged into its base), or a loaded `LoadedModel`.
        device: where to run; default CUDA when available.
        dtype: weights dtype name; default bfloat16 on CUDA, float32 on CPU.
        max_batch_size: requests per `generate` call; larger lists are split into such batches.
        base: an adapter folder's base model, instead of its `adapter_config.json`'s.
        min_pixels, max_pixels: the image size range the model's processor resizes into (Qwen's meaning);
            unset: the processor's own config.
    """

    name = "hf"

    def __init__(
        self,
        model: str | LoadedModel,
        *,
        device: str | None = None,
        dtype: str | None = None,
        max_batch_size: int = 16,
        min_pixels: int | None = None,
        max_pixels: int | None = None,
        base: str | None = None,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size ({max_batch_size}) must be at least 1")
        pixels = PixelRange(min_pixels, max_pixels)  # checked before a model is loaded
        self.loaded = (
            model if isinstance(model, LoadedModel) else load_model(model, device=device, dtype=dtype, base=base)
        )
        set_pixel_range(self.loaded.processor, **pixels.options())
        self.max_batch_size = max_batch_size
        self._label_ids: Any = None
        self._label_pieces: list[str] = []
        # A model that arrives PEFT-wrapped serves its adapters under their own names.
        self._slots: dict[str, str] = {name: name for name in getattr(self.loaded.model, "peft_config", {}) or {}}
        self._free_slots: list[str] = []
        self._next_slot = 0
        self._mixable: dict[str, bool] = {}  # slot -> whether its rows can share a batch (`mixes`)
        self._slot_tensors: dict[str, dict[str, Any]] = {}  # slot -> its LoRA parameters by state-dict key
        self._slot_scaling: dict[str, tuple] = {}  # slot -> what sets its scaling (`_scaling_key`)

    @property
    def tokenizer(self) -> Any:
        return self.loaded.tokenizer

    def _label_vocab(self) -> tuple[Any, list[str]]:
        if self._label_ids is None:
            import torch

            ids, pieces = _label_token_ids(self.tokenizer)
            self._label_ids = torch.tensor(ids, dtype=torch.long, device=self.loaded.model.device)
            self._label_pieces = pieces
        return self._label_ids, self._label_pieces

    def generate(self, requests: Sequence[ChatRequest], params: SamplingParams) -> list[Generation]:
        """Batches of up to `max_batch_size` requests; requests under different adapters share a batch where
        PEFT can mix them (`mixes`), else each adapter's requests run as batches of their own."""
        adapters = {request.adapter for request in requests}
        if len(adapters) > 1 and self.mixes(adapters):
            return self._in_batches(list(requests), params, adapter_names=[self._row_adapter(r) for r in requests])
        out: list[Generation | None] = [None] * len(requests)
        by_adapter: dict[str | None, list[int]] = {}
        for index, request in enumerate(requests):
            by_adapter.setdefault(request.adapter, []).append(index)
        for adapter, indices in by_adapter.items():
            with self.using_adapter(adapter):
                for index, generation in zip(indices, self._in_batches([requests[i] for i in indices], params)):
                    out[index] = generation
        return [g for g in out if g is not None]

    def _in_batches(
        self, requests: list[ChatRequest], params: SamplingParams, adapter_names: list[str] | None = None
    ) -> list[Generation]:
        out: list[Generation] = []
        for start in range(0, len(requests), self.max_batch_size):
            end = start + self.max_batch_size
            names = adapter_names[start:end] if adapter_names is not None else None
            out.extend(self._generate_batch(requests[start:end], params, adapter_names=names))
        return out

    # -- LoRA adapters over the resident base (PEFT) ----------------------------------------------------------
    #
    # Each served name maps to a PEFT adapter "slot". Unloading frees the slot but keeps its LoRA layers;
    # the next load with a compatible config (same rank, alpha and targets) copies its weights into that
    # slot in place (`peft.utils.hotswap`), which costs a tensor copy instead of PEFT's walk over every
    # module to inject new layers (~2 s on a 1B model). Generation is serial on this backend, so a slot is
    # never rewritten under a running request.

    @property
    def adapters(self) -> list[str]:
        """Names of the loaded adapters."""
        return list(self._slots)

    def load_adapter(self, name: str, path: str) -> None:
        """Load the PEFT adapter folder `path` under `name`; the base weights stay where they are."""
        self.install_adapter(name, path, self.stage_adapter(name, path))

    def stage_adapter(self, name: str, path: str) -> tuple[Any, dict[str, Any]]:
        """The half of a load that does not touch the model (config and tensors read from `path`, on the
        model's device): safe on another thread while this backend generates."""
        from peft import PeftConfig
        from peft.mapping import PEFT_TYPE_TO_CONFIG_MAPPING
        from peft.utils import load_peft_weights

        config = PEFT_TYPE_TO_CONFIG_MAPPING[PeftConfig._get_peft_type(path)].from_pretrained(path)
        return config, load_peft_weights(path, device=str(self.loaded.model.device))

    def install_adapter(self, name: str, path: str, staged: tuple[Any, dict[str, Any]]) -> None:
        """Put an adapter `stage_adapter` read under `name` (model thread): into a free compatible slot in
        place (a tensor copy), else into a new slot."""
        from peft import PeftModel
        from peft.utils.hotswap import (
            _insert_adapter_name_into_state_dict,
            check_hotswap_configs_compatible,
            hotswap_adapter_from_state_dict,
        )
        from peft.utils.peft_types import PeftType

        if name in self._slots:
            raise ValueError(f"an adapter named {name!r} is already loaded; load a new revision under a new name")
        config, state_dict = staged
        model = self.loaded.model
        while self._free_slots and config.peft_type == PeftType.LORA:
            slot = self._free_slots.pop()
            if self._copy_into_slot(slot, config, state_dict):
                self._slots[name] = slot
                return
            try:
                model.set_adapter(slot)
                check_hotswap_configs_compatible(model.active_peft_config, config)
                hotswap_adapter_from_state_dict(
                    model,
                    _insert_adapter_name_into_state_dict(state_dict, adapter_name=slot, parameter_prefix="lora_"),
                    adapter_name=slot,
                    config=config,
                )
            except Exception:  # an incompatible (or half-swapped) slot is dropped, not reused
                model.delete_adapter(slot)
                for cache in (self._mixable, self._slot_tensors, self._slot_scaling):
                    cache.pop(slot, None)
                continue
            self._slot_scaling[slot] = _scaling_key(config)
            self._slot_tensors.pop(slot, None)  # the hotswap may have replaced the slot's tensors
            self._slots[name] = slot
            return
        slot = f"slot{self._next_slot}"
        self._next_slot += 1
        if isinstance(model, PeftModel):
            model.load_adapter(path, adapter_name=slot)
        else:
            self.loaded.model = model = PeftModel.from_pretrained(model, path, adapter_name=slot)
        model.eval()
        if model.device.type == "cpu":
            # PEFT freezes the base. On CPU, torch's bf16 `linear` takes a path ~60x slower for a weight
            # without requires_grad; under inference_mode the flag changes nothing else.
            for param in model.parameters():
                param.requires_grad_(True)
        self._slot_scaling[slot] = _scaling_key(model.peft_config[slot])
        self._slots[name] = slot

    def _copy_into_slot(self, slot: str, config: Any, state_dict: dict[str, Any]) -> bool:
        """Install by copying the tensors into the free `slot`'s own, where the adapter has the same layers,
        shapes and scaling (a revision of the same training run always has): a copy per tensor, where PEFT's
        hotswap walks every module of the model twice (8 ms a load on the tiny model, more on a large one).
        False, having changed nothing, where it does not fit; the caller then hot-swaps."""
        import torch
        from peft.utils.hotswap import _insert_adapter_name_into_state_dict

        if self._slot_scaling.get(slot) != _scaling_key(config):
            return False
        tensors = self._lora_tensors(slot)
        incoming = _insert_adapter_name_into_state_dict(state_dict, adapter_name=slot, parameter_prefix="lora_")
        if incoming.keys() != tensors.keys() or any(incoming[k].shape != tensors[k].shape for k in tensors):
            return False
        with torch.no_grad():
            for key, param in tensors.items():
                param.copy_(incoming[key])
        return True

    def reserve_slots(self, count: int, path: str) -> int:
        """Have at least `count` adapter slots, each shaped like the adapter at `path` and free, so that later
        loads of revisions like it copy into a slot instead of building one (PEFT's injection walks every
        module: 12–31 ms a slot on the tiny model, on the thread that generates). Returns the slots made."""
        made: list[str] = []
        staged = None  # read once, and only if a slot is missing
        while len(self._slots) + len(self._free_slots) < count:
            name = f"mrjudge-reserved-{len(made)}"
            if staged is None:
                staged = self.stage_adapter(name, path)
            self.install_adapter(name, path, staged)
            made.append(name)
        for name in made:
            slot = self._slots[name]
            self._slot_mixes(slot)  # the checks a first use would make, made now
            self._lora_tensors(slot)
            self.unload_adapter(name)
        return len(made)

    def _lora_tensors(self, slot: str) -> dict[str, Any]:
        """The slot's LoRA parameters by state-dict key, found once per slot (a walk over the model)."""
        if slot not in self._slot_tensors:
            marker = f".{slot}."
            named = self.loaded.model.named_parameters()
            self._slot_tensors[slot] = {key: param for key, param in named if marker in key}
        return self._slot_tensors[slot]

    def unload_adapter(self, name: str) -> None:
        """Stop serving `name`; its slot stays allocated for the next load to reuse in place."""
        if name not in self._slots:
            raise ValueError(f"no adapter named {name!r} is loaded (loaded: {self.adapters})")
        self._free_slots.append(self._slots.pop(name))

    def mixes(self, names: set[str | None]) -> bool:
        """Whether one batch can hold rows under all of `names` (None: the bare base): PEFT's mixed-batch LoRA
        (`adapter_names=` in `generate`) applies each row's adapter to that row only. Not where an adapter has
        layers in the vision tower, whose inputs are image patches, not rows, or is not plain LoRA."""
        slots = {self._slots[name] for name in names if name is not None and name in self._slots}
        if len(slots) < len({name for name in names if name is not None}):
            return False  # an unknown name: the per-adapter path raises the error that names it
        return all(self._slot_mixes(slot) for slot in slots)

    def _slot_mixes(self, slot: str) -> bool:
        if slot not in self._mixable:
            from peft.tuners.lora import LoraLayer
            from peft.utils.peft_types import PeftType

            model = self.loaded.model
            layers = [
                name
                for name, module in model.named_modules()
                if isinstance(module, LoraLayer) and slot in module.lora_A
            ]
            self._mixable[slot] = (
                model.peft_config[slot].peft_type == PeftType.LORA
                and bool(layers)
                and not any(_VISION_PARTS & set(name.split(".")) for name in layers)
            )
        return self._mixable[slot]

    def _row_adapter(self, request: ChatRequest) -> str:
        return "__base__" if request.adapter is None else self._slots[request.adapter]

    @contextmanager
    def using_adapter(self, name: str | None) -> Iterator[None]:
        """Run the block with adapter `name` active (None: the bare base, adapters switched off)."""
        model = self.loaded.model
        if name is None:
            with model.disable_adapter() if hasattr(model, "peft_config") else nullcontext():
                yield
            return
        if name not in self._slots:
            raise ValueError(f"adapter {name!r} is not loaded (loaded: {self.adapters}); call load_adapter first")
        model.set_adapter(self._slots[name])
        yield

    def _encode(self, requests: Sequence[ChatRequest]) -> Any:
        processor = self.loaded.processor
        texts = [
            processor.apply_chat_template(r.messages, tokenize=False, add_generation_prompt=True) for r in requests
        ]
        images = [image for r in requests for image in r.images]
        self.tokenizer.padding_side = "left"  # generation appends on the right, so prompts must end aligned
        if self.loaded.is_vlm:
            return processor(text=texts, images=images or None, padding=True, return_tensors="pt")
        if images:
            raise ValueError("this model is text-only but a request carries images; use a VLM judge")
        return processor(texts, padding=True, return_tensors="pt", add_special_tokens=False)

    def _generate_batch(
        self, requests: Sequence[ChatRequest], params: SamplingParams, adapter_names: list[str] | None = None
    ) -> list[Generation]:
        import torch

        model = self.loaded.model
        inputs = self._encode(requests).to(model.device)
        want_logprobs = any(r.n_options for r in requests)
        recorder = _LabelLogprobRecorder(self._label_vocab()[0]) if want_logprobs else None
        sampling = params.temperature > 0
        kwargs: dict[str, Any] = dict(max_new_tokens=params.max_new_tokens, do_sample=sampling)
        if sampling:
            kwargs.update(temperature=params.temperature, top_p=params.top_p)
        else:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        if params.seed is not None:
            torch.manual_seed(params.seed)
        if adapter_names is not None:
            kwargs["adapter_names"] = adapter_names
        with torch.inference_mode():
            sequences = model.generate(
                **inputs,
                **kwargs,
                logits_processor=[recorder] if recorder else None,
                pad_token_id=self.tokenizer.pad_token_id,
            )
        new_tokens = sequences[:, inputs["input_ids"].shape[1] :].tolist()
        prompt_tokens = inputs["attention_mask"].sum(dim=1).tolist()  # left padding is not read
        stops = {self.tokenizer.pad_token_id, *self._eos_ids()}
        results = []
        for row, (request, ids) in enumerate(zip(requests, new_tokens)):
            stop = next((i for i, t in enumerate(ids) if t in stops), None)
            generated = len(ids) if stop is None else stop + 1  # the stop token was generated; padding was not
            ids = ids[: len(ids) if stop is None else stop]
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
            logprobs = None
            if request.n_options and recorder is not None:
                logprobs = answer_label_logprobs(
                    text,
                    request.n_options,
                    step_alternatives=lambda step, row=row: self._alternatives(recorder, row, step),
                    locate=lambda pos, ids=ids: self._locate(ids, pos),
                )
            results.append(
                Generation(
                    text=text,
                    label_logprobs=logprobs,
                    prompt_tokens=int(prompt_tokens[row]),
                    completion_tokens=generated,
                    finish_reason="length" if stop is None else "stop",  # no stop token: cut at max_new_tokens
                )
            )
        return results

    def _eos_ids(self) -> list[int]:
        eos = self.loaded.model.generation_config.eos_token_id
        if eos is None:
            eos = self.tokenizer.eos_token_id
        return [eos] if isinstance(eos, int) else list(eos or [])

    def _alternatives(self, recorder: _LabelLogprobRecorder, row: int, step: int) -> list[tuple[str, float]]:
        if step >= len(recorder.steps):
            return []
        values = recorder.steps[step][row].tolist()
        return list(zip(self._label_pieces, values))

    def _locate(self, ids: list[int], char_pos: int) -> tuple[int, str] | None:
        """Binary search for the token whose decoded span covers `char_pos` (prefix decodes, no O(n²))."""

        def decoded_len(n: int) -> int:
            return len(self.tokenizer.decode(ids[:n], skip_special_tokens=True))

        lo, hi = 0, len(ids)  # find the smallest n with decoded_len(n) > char_pos
        if decoded_len(hi) <= char_pos:
            return None
        while lo < hi:
            mid = (lo + hi) // 2
            if decoded_len(mid) > char_pos:
                hi = mid
            else:
                lo = mid + 1
        step = lo - 1
        start = decoded_len(step)
        piece = self.tokenizer.decode(ids[: step + 1], skip_special_tokens=True)[start:]
        return step, piece[: char_pos - start]

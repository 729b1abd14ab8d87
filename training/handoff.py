"""Adapter-only weight hand-off from a LoRA GRPO run to its vLLM generation server.

TRL's server mode syncs a PEFT policy by merging the adapter into the base and broadcasting *every*
parameter to `vllm serve` each step, then unmerging: the whole base model moves although only the
adapter changed. Here each sync exports the adapter as a store revision (megabytes), asks the server
to load it under the revision's own name (`POST /v1/load_lora_adapter`), points generation at that
name and unloads the previous one. A new name per revision is also what keeps vLLM's prefix cache
honest: its blocks are keyed by adapter, so no block computed with older weights is reused.

The server must run the same base with LoRA on and runtime updates allowed, and see the store's folder:

    VLLM_ALLOW_RUNTIME_LORA_UPDATING=True vllm serve Qwen/Qwen2.5-VL-7B-Instruct --enable-lora --max-lora-rank 64
    mrjudge train policy --config configs/policy_grpo_qwen2_5_vl_7b.yaml use_lora=true use_vllm=true \
        vllm_mode=server adapter_store=/shared/adapters adapter_handoff=true
"""

from __future__ import annotations

import time
from typing import Any

from adapter_revisions.store import AdapterStore, Revision

__all__ = ["AdapterHandoff", "install_adapter_handoff"]


class AdapterHandoff:
    """Push a PEFT policy's adapter to an OpenAI-compatible server with vLLM's runtime LoRA endpoints.

    Args:
        base_url: the server's root (`http://host:8000`, with or without `/v1`).
        store: where revisions are written; the server must be able to read the same paths.
        policy: the policy name revisions go under.
        api_key: bearer key for the server, if it has one.
        timeout: seconds per admin call.
    """

    def __init__(
        self,
        base_url: str,
        store: AdapterStore | str,
        policy: str,
        *,
        api_key: str | None = None,
        timeout: float = 120.0,
    ) -> None:
        self.base_url = base_url.rstrip("/").removesuffix("/v1")
        self.store = store if isinstance(store, AdapterStore) else AdapterStore(store)
        self.policy = policy
        self.api_key = api_key
        self.timeout = timeout
        self.current: Revision | None = None
        self.base_fingerprint: str | None = None
        self.bytes_moved = 0
        self.seconds = 0.0

    def push(self, model: Any, step: int | None = None) -> Revision:
        """Export `model`'s adapter, load it on the server, unload the one before; the new name to generate with."""
        start = time.perf_counter()
        if self.base_fingerprint is None:
            from adapter_revisions.fingerprint import base_fingerprint

            self.base_fingerprint = base_fingerprint(model)
        revision = self.store.save(
            self.policy,
            model,
            adapter_name=getattr(model, "active_adapter", "default"),
            base_fingerprint=self.base_fingerprint,
            step=step,
            parent=self.current.ref if self.current else None,
        )
        previous, self.current = self.current, revision
        if previous is None or previous.ref != revision.ref:  # an unchanged adapter is the same revision: no move
            self._post("load_lora_adapter", {"lora_name": revision.ref, "lora_path": str(revision.path)})
            if previous is not None:
                self._post("unload_lora_adapter", {"lora_name": previous.ref})
            self.bytes_moved += int(revision.meta.get("bytes", 0))
        self.seconds += time.perf_counter() - start
        return revision

    def _post(self, endpoint: str, body: dict[str, Any]) -> None:
        import httpx

        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        response = httpx.post(f"{self.base_url}/v1/{endpoint}", json=body, headers=headers, timeout=self.timeout)
        if response.status_code != 200:
            raise RuntimeError(
                f"{self.base_url}/v1/{endpoint} answered {response.status_code}: {response.text[:300]} (start the "
                "server with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True, and let it read "
                f"{self.store.root})"
            )


def install_adapter_handoff(trainer: Any, handoff: AdapterHandoff) -> None:
    """Make a TRL `GRPOTrainer` in vLLM server mode sync its LoRA policy through `handoff`.

    Replaces `trainer.vllm_generation.sync_weights` (TRL 1.x), which TRL calls whenever the policy has
    changed, and re-points the vLLM client's `model` (the name every generation request carries) at the
    newest revision. Only the main process talks to the server; the adapter is replicated under DDP.
    """
    generation = getattr(trainer, "vllm_generation", None)
    if generation is None or getattr(generation, "mode", None) != "server":
        raise ValueError("adapter hand-off needs use_vllm=true with vllm_mode=server (a separate `vllm serve`)")
    model = trainer.accelerator.unwrap_model(trainer.model)
    if not hasattr(model, "peft_config"):
        raise ValueError("adapter hand-off needs a LoRA policy: set use_lora=true")
    if trainer.is_deepspeed_enabled or trainer.is_fsdp_enabled:
        raise ValueError("adapter hand-off reads the adapter from one process: use DDP, not DeepSpeed/FSDP sharding")

    def sync_weights() -> None:
        if trainer.accelerator.is_main_process:
            revision = handoff.push(model, trainer.state.global_step)
            generation.vllm_client.model = revision.ref

    generation.sync_weights = sync_weights

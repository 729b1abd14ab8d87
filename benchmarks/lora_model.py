"""The model side of the hand-off benchmark: a seeded Qwen2 base at a named shape, its LoRA, one training step,
and the merge of W + s·B·A done two ways (out of place in bf16, and PEFT's own in-place merge, for its drift).

`benchmarks.adapter_handoff` times the hand-off itself; this is what it hands off.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from benchmarks.workers import qwen2_lm_config

__all__ = [
    "SHAPES",
    "TARGET_MODULES",
    "build_base",
    "count_7b",
    "lora_config",
    "merge_drift",
    "merged_state_dict",
    "qwen2_config",
    "train_step",
]

TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# Qwen2 shapes: hidden, layers, heads, kv heads, intermediate, vocab (embeddings untied in all three).
SHAPES: dict[str, tuple[int, int, int, int, int, int]] = {
    "1b": (2048, 20, 16, 4, 5504, 32000),  # 1.02e9 parameters
    "4b": (2560, 36, 32, 8, 9728, 151936),  # Qwen3-4B's widths in Qwen2 layers: 4.06e9 parameters (GPU runs)
    "small": (256, 4, 4, 2, 688, 4096),  # for development runs
    "7b": (3584, 28, 28, 4, 18944, 152064),  # Qwen2.5-7B, the text side of Qwen2.5-VL-7B
}


def qwen2_config(shape: str) -> Any:
    return qwen2_lm_config(*SHAPES[shape])


def build_base(shape: str, seed: int, device: str = "cpu") -> Any:
    """The model with uninitialised storage, then filled from a seeded generator in bf16 (seconds, not minutes)."""
    from transformers import AutoModelForCausalLM
    from transformers.initialization import no_init_weights

    with no_init_weights(), torch.device(device):
        model = AutoModelForCausalLM.from_config(qwen2_config(shape), dtype=torch.bfloat16)
    generator = torch.Generator(device).manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            elif name.endswith(".bias"):
                param.zero_()
            else:
                param.normal_(0.0, 0.02, generator=generator)
    return model.eval()


def lora_config(rank: int) -> Any:
    from peft import LoraConfig

    # A regex, as training/model_config.py writes it: PEFT turns a list into a set, which the store cannot write as JSON.
    targets = rf"^.*\.({'|'.join(TARGET_MODULES)})$"
    return LoraConfig(r=rank, lora_alpha=rank, lora_dropout=0.0, target_modules=targets, task_type="CAUSAL_LM")


def count_7b(rank: int) -> dict[str, int]:
    """Base and LoRA parameter counts of the 7B-shaped model, built on the meta device (no memory)."""
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(qwen2_config("7b"), dtype=torch.bfloat16)
        peft_model = get_peft_model(model, lora_config(rank))
    named = list(peft_model.named_parameters())
    lora = sum(p.numel() for n, p in named if ".lora_" in n)
    return {"base_params": sum(p.numel() for n, p in named if ".lora_" not in n), "lora_params": lora}


def train_step(peft_model: Any, optimizer: Any, tokens: int, vocab: int, seed: int) -> float:
    """One AdamW step of next-token loss on random tokens: a real, non-trivial change to the adapter."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (1, tokens), generator=generator).to(next(peft_model.parameters()).device)
    peft_model.train()
    loss = peft_model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    peft_model.eval()
    return float(loss.detach())


def merged_state_dict(peft_model: Any, adapter: str = "default") -> dict[str, Any]:
    """The bare base's state dict with W + ΔW in every LoRA target (out of place; the training base is untouched)."""
    from peft.tuners.lora import LoraLayer

    inner = peft_model.get_base_model()
    state = {k.replace(".base_layer.", "."): v for k, v in inner.state_dict().items() if ".lora_" not in k}
    with torch.no_grad():
        for name, module in inner.named_modules():
            if isinstance(module, LoraLayer) and adapter in module.lora_A:
                base = module.get_base_layer()
                if not isinstance(base, torch.nn.Linear) or module.fan_in_fan_out or module.use_dora.get(adapter):
                    raise NotImplementedError(f"{name}: only plain LoRA on nn.Linear is merged here")
                lora_a = module.lora_A[adapter].weight.to(base.weight.dtype)
                lora_b = module.lora_B[adapter].weight.to(base.weight.dtype)
                state[f"{name}.weight"] = torch.addmm(base.weight, lora_b, lora_a, alpha=module.scaling[adapter])
    return state


def merge_drift(peft_model: Any, adapter: str = "default") -> float:
    """Max |W - unmerge(merge(W))| of PEFT's in-place merge on a copy of the first LoRA layer (bf16 base)."""
    from peft.tuners.lora import LoraLayer

    layer = next(m for m in peft_model.modules() if isinstance(m, LoraLayer) and adapter in m.lora_A)
    layer = copy.deepcopy(layer)
    before = layer.get_base_layer().weight.detach().clone()
    layer.merge(adapter_names=[adapter])
    layer.unmerge()
    return float((layer.get_base_layer().weight.detach().float() - before.float()).abs().max())

"""Shared by the replay tests (test_replay*.py): batches, GRPO terms, the gradient comparison, a memory meter,
tiny hybrid models, a replay trainer on the tiny VLM, and the two-process DDP audit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from PIL import Image
from torch import nn

from training.replay import GRPOLoss, ReplayBatch, plain_backward, replay_backward, replay_token_logps

COS_MIN, REL_MAX = 0.999999, 1e-5
ROOT = Path(__file__).resolve().parents[2]


def text_batch(prompts: list[int], rows: list[tuple[int, int]], *, vocab: int, width: int, seed: int) -> ReplayBatch:
    """Random prompts of the given lengths, left-padded; `rows` are (prompt index, completion length)."""
    g = torch.Generator().manual_seed(seed)
    tokens = [torch.randint(3, vocab, (n,), generator=g) for n in prompts]
    longest = max(prompts)
    b = len(rows)
    prompt_ids, prompt_mask = torch.zeros(b, longest, dtype=torch.long), torch.zeros(b, longest, dtype=torch.long)
    completion_ids = torch.randint(3, vocab, (b, width), generator=g)
    completion_mask = torch.zeros(b, width, dtype=torch.long)
    for i, (p, n) in enumerate(rows):
        prompt_ids[i, longest - prompts[p] :] = tokens[p]
        prompt_mask[i, longest - prompts[p] :] = 1
        completion_mask[i, :n] = 1
        completion_ids[i, n:] = 0  # TRL pads completions after EOS with the pad id
    return ReplayBatch(prompt_ids, prompt_mask, completion_ids, completion_mask)


def grpo_terms(model: nn.Module, batch: ReplayBatch, seed: int) -> dict[str, torch.Tensor]:
    """Advantages, and old/ref log-probs pushed off the current ones so that clipping and KL both act."""
    g = torch.Generator().manual_seed(seed)
    logps, _ = replay_token_logps(model, batch)
    return {
        "advantages": torch.randn(batch.size, generator=g, dtype=torch.float64).to(logps.dtype),
        "old_logps": logps + 0.3 * torch.randn(logps.shape, generator=g, dtype=torch.float64).to(logps.dtype),
        "ref_logps": logps + 0.1 * torch.randn(logps.shape, generator=g, dtype=torch.float64).to(logps.dtype),
    }


def compare(model: nn.Module, batch: ReplayBatch, loss: GRPOLoss, terms: dict, **replay_kwargs) -> dict[str, float]:
    """Plain and replayed backward of the same loss; their gradients' cosine and relative L2, and the losses."""
    mask = batch.completion_mask
    weights = loss.row_weights(mask, num_items_in_batch=mask.sum())
    loss_fn = loss.loss_fn(weights, mask, terms["advantages"], terms["old_logps"], terms["ref_logps"])
    model.zero_grad(set_to_none=True)
    plain = plain_backward(model, batch, loss_fn)
    g_plain = take_grads(model)
    replayed = replay_backward(model, batch, loss_fn, **replay_kwargs)
    g_replay = take_grads(model)
    assert g_plain.norm() > 0
    cos, rel = agreement(g_plain, g_replay)
    return {
        "cos": cos,
        "rel": rel,
        "loss_diff": abs(float(plain.loss - replayed.loss)),
        "logp_diff": float((plain.logps - replayed.logps.double()).abs().max()),
        "groups": replayed.groups,
        "plain_rows": replayed.plain_rows,
    }


def take_grads(model: nn.Module) -> torch.Tensor:
    """The trainable parameters' gradients as one float64 vector (zeros where none), then cleared for the next pass."""
    params = [p for p in model.parameters() if p.requires_grad]
    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten().double() for p in params])
    model.zero_grad(set_to_none=True)
    return flat


def agreement(g_plain: torch.Tensor, g_replay: torch.Tensor) -> tuple[float, float]:
    """(cosine, relative L2 distance) of the replayed gradient to the plain one."""
    cos = float(nn.functional.cosine_similarity(g_plain, g_replay, dim=0))
    return cos, float((g_replay - g_plain).norm() / g_plain.norm())


def assert_logps_equal_plain(model: nn.Module, batch: ReplayBatch, **replay_kwargs) -> torch.Tensor:
    """Replayed no-grad log-probs and entropies equal the plain forward's; returns the log-probs."""
    logps, entropy = replay_token_logps(model, batch, entropy=True, **replay_kwargs)
    with torch.no_grad():
        plain = plain_backward(model, batch, lambda rows, lp, ent: lp.sum() * 0)
    assert torch.allclose(logps.double(), plain.logps, atol=1e-6)
    assert torch.allclose(entropy.double(), plain.entropy, atol=1e-6)
    return logps


def perturb_lora(model: nn.Module) -> nn.Module:
    """LoRA's B starts at zero: move it so the adapters shape the prompt state (and the reference differs)."""
    for name, p in model.named_parameters():
        if "lora_B" in name:
            nn.init.normal_(p, std=0.05)
    return model


def lora_lm(model_dir: Path, config) -> nn.Module:
    """The tiny text LM in float64 under `config`'s (perturbed) LoRA adapters, in training mode."""
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float64)
    return perturb_lora(get_peft_model(base, config).train())


def push_off_policy(inputs: dict) -> None:
    """Old log-probs moved off the current ones and random advantages, so that clipping and KL act."""
    g = torch.Generator().manual_seed(1)
    old = inputs["old_per_token_logps"]
    inputs["old_per_token_logps"] = old + 0.3 * torch.randn(old.shape, generator=g)
    inputs["advantages"] = torch.randn(inputs["advantages"].shape, generator=g)


def assert_step_equals_trl(tr, inputs: dict) -> tuple[dict[str, float], dict[str, float]]:
    """TRL's own `_compute_loss` and the replay trainer's `replay_step` on the same micro-batch: the same loss and
    gradient. Returns the step's metrics, TRL's and replay's."""
    from trl import GRPOTrainer

    tr._metrics["train"].clear()
    expected = GRPOTrainer._compute_loss(tr, tr.model, inputs)
    expected.backward()
    g_plain = take_grads(tr.model)
    trl_metrics = {k: v[0] for k, v in tr._metrics["train"].items()}
    tr._metrics["train"].clear()
    loss = tr.replay_step(tr.model, inputs)
    cos, rel = agreement(g_plain, take_grads(tr.model))
    assert cos >= COS_MIN and rel <= REL_MAX and abs(float(loss - expected)) <= 1e-6, (tr.loss_type, cos, rel)
    return trl_metrics, {k: v[0] for k, v in tr._metrics["train"].items()}


def assert_exact(stats: dict[str, float]) -> None:
    assert stats["cos"] >= COS_MIN and stats["rel"] <= REL_MAX, stats
    assert stats["loss_diff"] <= 1e-5 and stats["logp_diff"] <= 1e-4, stats


def vlm_batch(model_dir: Path) -> tuple[ReplayBatch, int]:
    """Qwen2.5-VL rows as TRL builds them: two image prompts (different sizes) × 2, a text-only prompt × 2, and
    one image prompt with a single completion. Returns the batch and the image token id."""
    from transformers import AutoProcessor

    import judge.backends.hf_compat  # noqa: F401  (the image-only processor, no torchvision needed)

    processor = AutoProcessor.from_pretrained(model_dir)
    processor.tokenizer.padding_side = "left"
    red, blue, green = Image.new("RGB", (84, 56), (220, 0, 0)), Image.new("RGB", (56, 112), (0, 0, 220)), Image.new("RGB", (56, 56), (0, 200, 0))  # fmt: skip
    ask = lambda i: "What colour is it?" + " Look again." * i  # noqa: E731
    prompts = [
        ([{"type": "image"}, {"type": "text", "text": ask(0)}], [red]),
        ([{"type": "image"}, {"type": "text", "text": ask(1)}], [blue]),
        ([{"type": "text", "text": "Count to three, please."}], []),
        ([{"type": "image"}, {"type": "text", "text": ask(2)}], [green]),
    ]
    order = [0, 1, 0, 2, 3, 1, 2]
    texts = [
        processor.apply_chat_template([{"role": "user", "content": prompts[i][0]}], add_generation_prompt=True, tokenize=False)
        for i in order
    ]  # fmt: skip
    enc = processor(text=texts, images=[prompts[i][1] for i in order], padding=True, return_tensors="pt")
    g = torch.Generator().manual_seed(4)
    width = 10
    lengths = [10, 4, 7, 9, 6, 1, 10]
    completion_ids = torch.randint(3, 600, (len(order), width), generator=g)
    completion_mask = (torch.arange(width)[None] < torch.tensor(lengths)[:, None]).long()
    types = torch.cat([enc["mm_token_type_ids"], torch.zeros_like(completion_ids)], dim=1)
    batch = ReplayBatch(
        enc["input_ids"],
        enc["attention_mask"],
        completion_ids * completion_mask,
        completion_mask,
        pixel_values=enc["pixel_values"],
        image_grid_thw=enc["image_grid_thw"],
        num_images=[len(prompts[i][1]) for i in order],
        mm_token_type_ids=types,
    )
    return batch, processor.image_token_id


class SavedBytes:
    """Peak bytes of activations autograd holds at once (parameters excluded): CPU memory without the noise.

    A storage saved several times (one mask shared by every layer, one buffer behind many views) counts once.
    """

    def __init__(self, model: nn.Module) -> None:
        self.params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self.live = self.peak = 0
        self.holders: dict[int, int] = {}

    def __enter__(self) -> SavedBytes:
        meter = self

        class Held:
            def __init__(self, t: torch.Tensor) -> None:
                # Detached: a saved *output* held with its grad_fn would be a reference cycle autograd never frees
                # (the parts of a graph backward does not reach, e.g. the last layer's MLP of a prompt pass).
                self.t, self.n = t.detach(), t.untyped_storage().nbytes()
                self.ptr = t.untyped_storage().data_ptr()
                meter.holders[self.ptr] = meter.holders.get(self.ptr, 0) + 1
                if meter.holders[self.ptr] == 1:
                    meter.live += self.n
                    meter.peak = max(meter.peak, meter.live)

            def __del__(self) -> None:
                meter.holders[self.ptr] -= 1
                if not meter.holders[self.ptr]:
                    del meter.holders[self.ptr]
                    meter.live -= self.n

        def pack(t: torch.Tensor):
            return t if t.untyped_storage().data_ptr() in self.params else Held(t)

        self.hooks = torch.autograd.graph.saved_tensors_hooks(pack, lambda h: h.t if isinstance(h, Held) else h)
        self.hooks.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.hooks.__exit__(*exc)


def hybrid_model(kind: str) -> nn.Module:
    """A tiny Qwen3.5 (dense) or Qwen3-Next (MoE) text model: linear-attention layers between full-attention ones."""
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig, Qwen3NextConfig, Qwen3NextForCausalLM

    shape = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, linear_key_head_dim=16, linear_value_head_dim=16,
                 linear_num_key_heads=2, linear_num_value_heads=4,
                 layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"])  # fmt: skip
    torch.manual_seed(0)
    if kind == "qwen3_5":
        return Qwen3_5ForCausalLM(Qwen3_5TextConfig(**shape)).double().train()
    config = Qwen3NextConfig(**shape, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                             shared_expert_intermediate_size=32)  # fmt: skip
    return Qwen3NextForCausalLM(config).train()  # grouped experts run in float32 only


def colour_reward(completions, **kwargs) -> list[float]:
    return [float(len(str(c)) % 3) for c in completions]


def trainer(model_dir: Path, tmp_path: Path, *, lora: bool = False, **overrides):
    import datasets
    from peft import LoraConfig
    from transformers import AutoModelForImageTextToText, AutoProcessor
    from trl import GRPOConfig

    import judge.backends.hf_compat  # noqa: F401
    from tests.support.training import CPU_RUN
    from training.replay_trainer import ReplayGRPOTrainer

    processor = AutoProcessor.from_pretrained(model_dir)
    processor.tokenizer.padding_side = "left"
    images = [Image.new("RGB", (56 + 28 * i, 56), (200, 40 * i, 0)) for i in range(3)]
    prompts = [[{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Colour?" + " Sure?" * i}]}]
               for i in range(3)]  # fmt: skip
    data = datasets.Dataset.from_dict({"prompt": prompts, "images": [[im] for im in images]})
    options = dict(output_dir=str(tmp_path), **CPU_RUN, per_device_train_batch_size=9, num_generations=3,
                   max_completion_length=8, max_steps=1, beta=0.04, num_iterations=2, temperature=0.9)  # fmt: skip
    options.update(overrides)
    peft_config = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj"]) if lora else None
    torch.manual_seed(0)
    return ReplayGRPOTrainer(
        model=AutoModelForImageTextToText.from_pretrained(model_dir),
        args=GRPOConfig(**options),
        reward_funcs=[colour_reward],
        train_dataset=data,
        processing_class=processor,
        peft_config=peft_config,
    )


DDP_SCRIPT = """
import json, os, sys
import torch
import torch.distributed as dist
torch.set_num_threads(1)
import datasets
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig
from tests.support.training import CPU_RUN
from training.recipe import close_process_group
from training.replay_trainer import ReplayGRPOTrainer

path, out = sys.argv[1], sys.argv[2]
prompt_chunk = int(sys.argv[3]) if len(sys.argv) > 3 else 0
tokenizer = AutoTokenizer.from_pretrained(path)
tokenizer.padding_side = "left"
data = datasets.Dataset.from_dict({"prompt": [[{"role": "user", "content": f"Count to {i}, one by one."}] for i in range(8)]})
config = GRPOConfig(output_dir=out, **CPU_RUN, per_device_train_batch_size=4, num_generations=4,
                    max_completion_length=8, max_steps=2, gradient_accumulation_steps=2, save_strategy="no",
                    learning_rate=1e-3)
trainer = ReplayGRPOTrainer(model=AutoModelForCausalLM.from_pretrained(path), args=config,
                            reward_funcs=[lambda completions, **kw: [len(c[0]["content"]) % 5 / 4 for c in completions]],
                            train_dataset=data, processing_class=tokenizer)
trainer.args.replay_prompt_chunk = prompt_chunk
from training.replay import chunked as replay_chunked
chunked_states, chunked_state = [], replay_chunked.chunked_prompt_state
replay_chunked.chunked_prompt_state = lambda *a, **k: chunked_states.append(1) or chunked_state(*a, **k)
world = dist.get_world_size()
average, checks = trainer._average_gradients_across_processes, []

def flat():
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten()
                      for p in trainer.model.parameters() if p.requires_grad])

def audited():
    before, sync = flat().clone(), trainer.accelerator.sync_gradients
    average()
    if sync:
        gathered = [torch.zeros_like(before) for _ in range(world)]
        dist.all_gather(gathered, before)
        checks.append({"to_mean": float((flat() - sum(gathered) / world).abs().max()),
                       "ranks_differed": float((gathered[0] - gathered[1]).abs().max())})

trainer._average_gradients_across_processes = audited
trainer.train()
params = torch.cat([p.detach().flatten() for p in trainer.model.parameters()])
gathered = [torch.zeros_like(params) for _ in range(world)]
dist.all_gather(gathered, params)
if dist.get_rank() == 0:
    print(json.dumps({"kind": str(trainer.accelerator.distributed_type), "checks": checks,
                      "param_spread": float((gathered[0] - gathered[1]).abs().max()),
                      "chunked_states": len(chunked_states)}), flush=True)
close_process_group()
"""


def assert_two_ddp_processes_agree(model_dir: Path, tmp_path: Path, prompt_chunk: int = 0) -> None:
    """Two CPU processes under torchrun train 2 replayed GRPO steps (accumulation 2, `prompt_chunk` tokens per
    chunk, 0: whole prompts) and must agree: every gradient sync averages the ranks' (different) gradients
    exactly, both end with the same weights, and the prompts went in chunks exactly when asked."""
    from judge.loopback import free_port

    script = tmp_path / "ddp.py"
    script.write_text(DDP_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    # A port of its own: the default 29500 can still be held by an earlier distributed test's store.
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
               str(free_port()), str(script), str(model_dir), str(tmp_path / "out"), str(prompt_chunk)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-4000:]  # the rank's own error sits above torchrun's summary
    report = json.loads([line for line in done.stdout.splitlines() if line.startswith("{")][-1])
    assert report["kind"] == "DistributedType.MULTI_CPU" and len(report["checks"]) == 2  # 2 steps × 1 sync each
    assert all(c["to_mean"] <= 1e-7 and c["ranks_differed"] > 1e-3 for c in report["checks"]), report
    assert report["param_spread"] == 0.0, "both processes took the same optimizer step"
    assert (report["chunked_states"] > 0) == (prompt_chunk > 0), report

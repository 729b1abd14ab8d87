"""`training.grpo_loss` gives TRL's GRPO loss: the same value and gradient as `GRPOTrainer._compute_loss`.

Each case builds a real `GRPOTrainer` over the tiny LM from a `GRPOConfig`, so TRL's own `__init__` turns the
config into its loss settings, and hands TRL and `GRPOLoss.from_config` the same micro-batch: completions
of uneven length (one empty), off-policy old log-probs, a reference that differs, and a `num_items_in_batch`
spanning a larger generation batch. The model's forward is TRL's business, not the loss's, and its fused
head returns float32: the trainer is handed float64 log-probs with autograd instead, so the two losses and
their gradients are compared in float64.
"""

from __future__ import annotations

import pytest
import torch

from training.grpo_loss import LOSS_TYPES, GRPOLoss

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/training/conftest.py

LENGTHS = [7, 3, 5, 0, 6, 1]  # completion tokens per row (width 7); row 3 is empty


@pytest.fixture(scope="module")
def dataset():
    import datasets

    return datasets.Dataset.from_dict({"prompt": ["Count to three.", "Name a colour."]})


def grpo_trainer(model_dir, tmp_path, dataset, **options):
    """A TRL `GRPOTrainer` built from `GRPOConfig(**options)` on the tiny LM."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    config = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", disable_tqdm=True,
                        per_device_train_batch_size=6, num_generations=3, max_completion_length=7, **options)  # fmt: skip
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir),
        args=config,
        reward_funcs=[lambda completions, **kwargs: [0.0] * len(completions)],
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    trainer.current_gradient_accumulation_steps = 2  # TRL's normalisers divide by it
    return trainer


def micro_batch(seed: int = 0) -> dict[str, torch.Tensor]:
    """TRL's prepared micro-batch plus the policy's log-probs (`logps`, float64), old/ref pushed off them."""
    g = torch.Generator().manual_seed(seed)
    rows, width = len(LENGTHS), max(LENGTHS)
    completion_mask = (torch.arange(width)[None] < torch.tensor(LENGTHS)[:, None]).long()
    logps = -3 * torch.rand(rows, width, generator=g, dtype=torch.float64) * completion_mask

    def off(scale: float) -> torch.Tensor:
        return logps + scale * torch.randn(rows, width, generator=g, dtype=torch.float64)

    return {
        "prompt_ids": torch.randint(3, 100, (rows, 5), generator=g),
        "prompt_mask": torch.ones(rows, 5, dtype=torch.long),
        "completion_ids": torch.randint(3, 100, (rows, width), generator=g) * completion_mask,
        "completion_mask": completion_mask,
        "advantages": torch.randn(rows, generator=g, dtype=torch.float64),
        "num_items_in_batch": completion_mask.sum() * 3,  # the generation batch: 3 micro-batches' tokens
        "old_per_token_logps": off(0.3),
        "ref_per_token_logps": off(0.1),
        "sampling_per_token_logps": off(0.2),
        "importance_sampling_ratio": torch.exp(off(0.1) - logps),
        "logps": logps,
    }


def trl_and_ours(trainer, batch: dict, *, on_policy: bool = False, vllm_ratio: bool = False, sampling: bool = False):
    """(TRL's loss and d loss / d logps, ours): `_compute_loss` against `GRPOLoss.from_config(args)`."""
    keys = ["prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "advantages", "num_items_in_batch"]
    keys += ["ref_per_token_logps"] + ["old_per_token_logps"] * (not on_policy)  # none: TRL detaches the current
    keys += ["sampling_per_token_logps"] * sampling + ["importance_sampling_ratio"] * vllm_ratio
    inputs = {k: batch[k] for k in keys}
    if vllm_ratio:
        trainer.use_vllm = trainer.vllm_importance_sampling_correction = True  # only the ratio: nothing generates
    logps = batch["logps"].clone().requires_grad_()
    entropy = torch.ones_like(logps)
    trainer._get_per_token_logps_and_entropies = lambda *args, **kwargs: (logps, entropy, None)

    expected = trainer._compute_loss(trainer.model, inputs)
    (expected_grad,) = torch.autograd.grad(expected, logps)

    loss = GRPOLoss.from_config(trainer.args)
    mask = inputs["completion_mask"]
    weights = loss.row_weights(
        mask,
        accumulation_steps=trainer.current_gradient_accumulation_steps,
        num_items_in_batch=inputs["num_items_in_batch"],
        num_processes=trainer.accelerator.num_processes,
        steps_per_generation=trainer.args.steps_per_generation,
        training=trainer.model.training,
    )
    ours, kl = loss.rows_loss(
        logps,
        mask,
        inputs["advantages"],
        weights,
        old_logps=inputs.get("old_per_token_logps"),
        ref_logps=inputs["ref_per_token_logps"] if loss.beta else None,
        importance_ratio=inputs.get("importance_sampling_ratio"),
        sampling_logps=inputs.get("sampling_per_token_logps"),
    )
    assert (kl is not None) == bool(loss.beta)
    return (expected, expected_grad), (ours, torch.autograd.grad(ours, logps)[0])


def assert_same(trl, ours) -> None:
    (expected, expected_grad), (value, grad) = trl, ours
    assert expected.dtype == value.dtype == torch.float64
    assert abs(value.item() - expected.item()) <= 1e-6, (value.item(), expected.item())
    torch.testing.assert_close(grad, expected_grad, rtol=1e-6, atol=1e-9)
    assert expected.item() != 0 and expected_grad.abs().max() > 0, "a loss with no gradient would prove nothing"


@pytest.mark.parametrize("beta", [0.0, 0.04], ids=["no-kl", "kl"])
@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_every_loss_type_equals_trl_compute_loss(loss_type, beta, tiny_lm_dir, tmp_path, dataset):
    # luspo is a sequence-level loss (TRL warns otherwise); the others at TRL's default token level.
    level = "sequence" if loss_type == "luspo" else "token"
    options = dict(loss_type=loss_type, beta=beta, importance_sampling_level=level, epsilon_high=0.28)
    if loss_type == "cispo":
        options["epsilon_high"] = 1.2  # ScaleRL's ε_max is 5; 1.2 clips some of these ratios
    trainer = grpo_trainer(tiny_lm_dir, tmp_path, dataset, **options)
    trainer.model.train()
    assert_same(*trl_and_ours(trainer, micro_batch()))


@pytest.mark.parametrize(
    "options, extras",
    [
        ({"loss_type": "grpo", "importance_sampling_level": "sequence"}, {}),  # GSPO
        ({"loss_type": "dapo", "delta": 1.1, "beta": 0.04, "use_bias_correction_kl": False}, {}),  # two-sided clip
        ({"loss_type": "dapo", "off_policy_mask_threshold": 0.01}, {"sampling": True}),  # DeepSeek-V3.2's mask
        ({"loss_type": "bnpo", "off_policy_mask_threshold": 0.01}, {}),  # the mask against the old log-probs
        ({"loss_type": "dapo", "beta": 0.04}, {"vllm_ratio": True}),  # vLLM's importance-sampling correction
        ({"loss_type": "vespo"}, {"vllm_ratio": True}),  # ... folded into vespo's gamma weight instead
        ({"loss_type": "sapo", "sapo_temperature_neg": 2.0}, {}),
        ({"loss_type": "vespo", "vespo_k_pos": 1.5, "vespo_lambda_neg": 1.0}, {}),
        ({"loss_type": "dapo", "steps_per_generation": 3}, {}),  # dapo's normaliser spans the generation batch
        ({"loss_type": "dr_grpo", "beta": 0.04}, {"on_policy": True}),  # as multi-policy GRPO runs it
        ({"loss_type": "grpo", "beta": 0.04}, {"on_policy": True}),
    ],
)
def test_loss_options_equal_trl_compute_loss(options, extras, tiny_lm_dir, tmp_path, dataset):
    trainer = grpo_trainer(tiny_lm_dir, tmp_path, dataset, **options)
    trainer.model.train()
    assert_same(*trl_and_ours(trainer, micro_batch(seed=1), **extras))


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "luspo"])
def test_eval_mode_skips_the_accumulation_normaliser_as_trl_does(loss_type, tiny_lm_dir, tmp_path, dataset):
    trainer = grpo_trainer(tiny_lm_dir, tmp_path, dataset, loss_type=loss_type, steps_per_generation=2)
    trainer.model.eval()
    assert_same(*trl_and_ours(trainer, micro_batch(seed=2)))


def test_rows_split_anyhow_add_up_to_the_whole_loss():
    """The point of the per-row weights: any partition of the rows sums to the micro-batch's loss."""
    g = torch.Generator().manual_seed(3)
    logps = -torch.rand(6, 7, generator=g, dtype=torch.float64)
    mask = (torch.arange(7)[None] < torch.tensor(LENGTHS)[:, None]).long()
    advantages, old = torch.randn(6, generator=g, dtype=torch.float64), logps + 0.2
    for loss_type in LOSS_TYPES:
        loss = GRPOLoss(loss_type=loss_type, beta=0.04, max_completion_length=7)
        weights = loss.row_weights(mask, num_items_in_batch=mask.sum())
        fn = loss.loss_fn(weights, mask, advantages, old, logps - 0.1)
        whole = fn(torch.arange(6), logps, None)
        parts = sum(fn(torch.tensor(rows), logps[rows], None) for rows in ([4], [0, 2, 5], [1, 3]))
        assert abs(float(whole - parts)) <= 1e-12 and whole != 0, loss_type


def test_from_config_reads_grpo_config_as_trl_does():
    from trl import GRPOConfig

    config = GRPOConfig(output_dir="unused", use_cpu=True, loss_type="sapo", epsilon=0.1, delta=2.0, beta=0.02)
    loss = GRPOLoss.from_config(config)
    assert (loss.loss_type, loss.epsilon_low, loss.epsilon_high, loss.delta, loss.beta) == ("sapo", 0.1, 0.1, 2.0, 0.02)
    assert loss.use_bias_correction_kl is config.use_bias_correction_kl is True  # TRL's default, not ours
    assert loss.max_completion_length == config.max_completion_length


def test_an_unknown_loss_type_names_the_supported_ones():
    with pytest.raises(
        ValueError, match="loss_type must be one of grpo, bnpo, dr_grpo, dapo, cispo, sapo, luspo, vespo"
    ):
        GRPOLoss(loss_type="ppo")
    with pytest.raises(ValueError, match="importance_sampling_level must be token or sequence"):
        GRPOLoss(importance_sampling_level="row")


def test_every_trl_loss_type_is_supported():
    """A TRL upgrade that adds a loss type fails here until `training.grpo_loss` reproduces it."""
    import dataclasses
    import re

    from trl import GRPOConfig

    help_text = next(f for f in dataclasses.fields(GRPOConfig) if f.name == "loss_type").metadata["help"]
    supported = re.search(r"Supported values are (.*?)\. ", help_text).group(1)
    assert set(re.findall(r"'(\w+)'", supported)) == set(LOSS_TYPES)

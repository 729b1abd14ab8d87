"""Multi-policy GRPO: mixed-adapter batches give each row its own adapter's result, concurrent training ends
with the adapters one-after-another training gives, a failing policy stops alone, and the CLI runs a YAML.

Rewards are cheap and in process (`length_reward` below, `reference_f1`), so no judge server is needed.
"""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch
from mrjudge.cli import main

from training.multi_policy import MultiPolicyConfig, MultiPolicyTrainer, load_multi_policy_config
from training.multi_policy.rewards import reference_f1
from training.multi_policy.rollout import RolloutRequest, generate_mixed

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/training/conftest.py


def length_reward(completions, **kwargs):
    """Longer completions earn more: random tiny-model samples differ in length, so groups have spread."""
    return [len(c[-1]["content"]) / 40 for c in completions]


def nan_reward(completions, **kwargs):
    return [math.nan for _ in completions]


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    root = tmp_path_factory.mktemp("policies-data")
    files = {}
    for name, words in (("colours", ["red", "blue", "green"]), ("numbers", ["one", "two", "three", "four"])):
        path = root / f"{name}.jsonl"
        path.write_text(
            "".join(json.dumps({"prompt": f"Say {w} please, {i}", "answer": w}) + "\n" for i, w in enumerate(words * 2))
        )
        files[name] = str(path)
    (root / "empty.jsonl").write_text("")
    files["empty"] = str(root / "empty.jsonl")
    return files


def _config(tiny_lm_dir, tmp_path, prompts, **overrides):
    policies = overrides.pop(
        "policies",
        [
            {"name": "colours", "train_file": prompts["colours"], "seed": 1},
            {"name": "numbers", "train_file": prompts["numbers"], "seed": 2, "beta": 0.04, "loss_type": "grpo",
             "learning_rate": 2e-2, "lora_r": 4, "max_completion_length": 6},
        ],
    )  # fmt: skip
    defaults = {"prompts_per_step": 2, "num_generations": 4, "max_completion_length": 8, "learning_rate": 1e-2,
                "reward": "tests.training.test_multi_policy:length_reward"}  # fmt: skip
    values = dict(model_name_or_path=str(tiny_lm_dir), output_dir=str(tmp_path), max_steps=2, device="cpu",
                  logging_steps=0, policy_defaults=defaults, policies=policies)  # fmt: skip
    return MultiPolicyConfig(**{**values, **overrides})


def _lora(trainer):
    return {n: p.detach().clone() for n, p in trainer.model.named_parameters() if ".lora_" in n}


def test_mixed_batch_rows_get_their_own_adapters_samples(tiny_lm_dir, tmp_path, prompts):
    """Sampling two policies in one batch gives each row the tokens it gets when its policy samples alone."""
    trainer = MultiPolicyTrainer(_config(tiny_lm_dir, tmp_path, prompts))
    generator = torch.Generator().manual_seed(0)
    for param in trainer.model.parameters():  # make the adapters differ from the base and from each other
        if param.requires_grad:
            torch.nn.init.normal_(param, std=0.5, generator=generator)

    def requests():
        return [
            RolloutRequest("colours", [[5, 6, 7], [5, 6, 7], [9]], 8, 1.0, seed=3),
            RolloutRequest("numbers", [[11, 12, 13, 14, 15]] * 2, 5, 0.7, seed=4),
        ]

    together = requests()
    generate_mixed(trainer.model, together, pad_id=trainer.pad_id, eos_id=trainer.eos_id)
    for alone in requests():
        generate_mixed(trainer.model, [alone], pad_id=trainer.pad_id, eos_id=trainer.eos_id)
        mixed = next(r for r in together if r.adapter == alone.adapter)
        assert mixed.completions == alone.completions and mixed.error is None
    assert all(len(c) <= 5 for c in together[1].completions)
    ids = torch.tensor([[11, 12, 13, 14, 15]] * 3)
    with torch.no_grad():
        mixed = trainer.model(input_ids=ids, adapter_names=["colours", "numbers", "__base__"]).logits[:, -1]
        for row, name in enumerate(("colours", "numbers", "__base__")):
            alone = trainer.model(input_ids=ids[:1], adapter_names=[name]).logits[0, -1]
            assert torch.allclose(mixed[row], alone, atol=1e-5)
    assert (mixed[0] - mixed[1]).abs().max() > 0.1 and (mixed[0] - mixed[2]).abs().max() > 0.1


def test_adapter_segments_equal_peft_mixed_batches_with_gradients(tiny_lm_dir, tmp_path, prompts):
    """Row segments (slices) give PEFT's mixed-batch logits and the same gradient for every adapter."""
    from training.multi_policy.segments import adapter_segments, runs_of

    trainer = MultiPolicyTrainer(_config(tiny_lm_dir, tmp_path, prompts))
    generator = torch.Generator().manual_seed(0)
    for param in trainer.model.parameters():
        if param.requires_grad:
            torch.nn.init.normal_(param, std=0.5, generator=generator)
    names = ["colours", "colours", "numbers", "__base__", "numbers"]
    ids = torch.tensor([[11, 12, 13, 14, 15], [5, 6, 7, 8, 9], [3, 4, 5, 6, 7], [9, 9, 8, 7, 6], [12, 11, 10, 9, 8]])
    assert runs_of(names) == [("colours", 2), ("numbers", 1), ("__base__", 1), ("numbers", 1)]

    def logits_and_grads(segmented: bool):
        trainer.model.zero_grad(set_to_none=True)
        if segmented:
            with adapter_segments(trainer.model, runs_of(names)) as covered:
                assert covered
                logits = trainer.model(input_ids=ids).logits
        else:
            logits = trainer.model(input_ids=ids, adapter_names=names).logits
        (logits.float().pow(2).mean()).backward()
        grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
        return logits.detach(), grads

    peft_logits, peft_grads = logits_and_grads(False)
    seg_logits, seg_grads = logits_and_grads(True)
    torch.testing.assert_close(seg_logits, peft_logits, rtol=1e-5, atol=1e-6)
    assert peft_grads.keys() == seg_grads.keys()
    assert {n.split(".")[-2] for n in seg_grads} == {"colours", "numbers"}
    for name in peft_grads:
        torch.testing.assert_close(seg_grads[name], peft_grads[name], rtol=1e-5, atol=1e-7)
    with adapter_segments(trainer.model, [("colours", 2)]), pytest.raises(ValueError, match="cover 2 rows"):
        trainer.model(input_ids=ids)
    # outside the block the model is PEFT's again: no instance-level forward left behind
    assert not any("forward" in vars(m) for m in trainer.model.modules())


def test_stacked_segments_equal_peft_mixed_batches(tiny_lm_dir, tmp_path, prompts):
    """Equal segments of same-shaped adapters go through stacked `bmm`s: PEFT's logits and gradients, both
    with autograd (stacked in the graph) and without it (stacked once for the block)."""
    from training.multi_policy import segments

    policies = [{"name": "colours", "train_file": prompts["colours"], "seed": 1},
                {"name": "numbers", "train_file": prompts["numbers"], "seed": 2}]  # fmt: skip
    trainer = MultiPolicyTrainer(_config(tiny_lm_dir, tmp_path, prompts, policies=policies))
    trainer.model.double()  # the two paths sum in different orders: compare them above float32's rounding
    generator = torch.Generator().manual_seed(0)
    for param in trainer.model.parameters():
        if param.requires_grad:
            torch.nn.init.normal_(param, std=0.5, generator=generator)
    names = ["colours", "colours", "numbers", "numbers"]
    ids = torch.tensor([[11, 12, 13, 14, 15], [5, 6, 7, 8, 9], [3, 4, 5, 6, 7], [9, 9, 8, 7, 6]])
    layers = segments._covered(trainer.model)
    assert layers and all(segments._stackable(layer, segments.runs_of(names)) for layer in layers)

    def logits_and_grads(segmented: bool):
        trainer.model.zero_grad(set_to_none=True)
        if segmented:
            with segments.adapter_segments(trainer.model, segments.runs_of(names)):
                logits = trainer.model(input_ids=ids).logits
        else:
            logits = trainer.model(input_ids=ids, adapter_names=names).logits
        logits.pow(2).mean().backward()
        return logits.detach(), {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}

    peft_logits, peft_grads = logits_and_grads(False)
    stacked_logits, stacked_grads = logits_and_grads(True)
    torch.testing.assert_close(stacked_logits, peft_logits, rtol=1e-9, atol=1e-12)
    assert stacked_grads.keys() == peft_grads.keys() and {n.split(".")[-2] for n in peft_grads} == set(names)
    for name in peft_grads:
        torch.testing.assert_close(stacked_grads[name], peft_grads[name], rtol=1e-9, atol=1e-12)
    with torch.no_grad(), segments.adapter_segments(trainer.model, segments.runs_of(names)):
        torch.testing.assert_close(trainer.model(input_ids=ids).logits, peft_logits, rtol=1e-9, atol=1e-12)
        with torch.enable_grad():  # a stack taken without autograd is not reused under it
            trainer.model.zero_grad(set_to_none=True)
            trainer.model(input_ids=ids).logits.pow(2).mean().backward()
    for name in peft_grads:
        torch.testing.assert_close(trainer.model.get_parameter(name).grad, peft_grads[name], rtol=1e-9, atol=1e-12)


def test_sample_tokens_draws_from_each_rows_distribution():
    """Inverse-transform sampling: each row's frequencies follow its probabilities, zero never comes up,
    and a seed gives the same tokens."""
    from training.multi_policy.rollout import sample_tokens

    probs = torch.tensor([[0.1, 0.0, 0.6, 0.3], [0.0, 0.0, 0.0, 1.0], [0.25, 0.25, 0.25, 0.25]])
    generator = torch.Generator().manual_seed(7)
    draws = torch.stack([sample_tokens(probs, generator) for _ in range(20_000)])  # [draws, rows]
    for row in range(3):
        freq = torch.bincount(draws[:, row], minlength=4).float() / len(draws)
        torch.testing.assert_close(freq, probs[row], atol=0.015, rtol=0)
    assert not (draws[:, 0] == 1).any() and (draws[:, 1] == 3).all()
    again = torch.Generator().manual_seed(7)
    assert torch.equal(torch.stack([sample_tokens(probs, again) for _ in range(50)]), draws[:50])


def test_adapter_segments_leave_dora_to_peft(tiny_lm_dir):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from training.multi_policy.segments import adapter_segments

    base = AutoModelForCausalLM.from_pretrained(str(tiny_lm_dir))
    model = get_peft_model(base, LoraConfig(r=2, target_modules=["q_proj"], use_dora=True), adapter_name="a")
    with adapter_segments(model, [("a", 1)]) as covered:
        assert not covered  # the caller passes adapter_names instead


@pytest.mark.parametrize("numbers_rank", [4, 8], ids=["segment-at-a-time", "stacked"])
def test_concurrent_training_ends_with_the_sequential_adapters(tiny_lm_dir, tmp_path, prompts, numbers_rank):
    """Two policies trained together (mixed-adapter forward and backward) equal the two trained in turn.

    With ranks 8 and 4 each segment's LoRA runs alone, as it does one after another. With both at 8 they go
    through stacked `bmm`s, which sum in another order; AdamW turns a gradient element near its eps into a
    whole step, so float32's rounding can show up as ~1e-3 of a step: that case runs in float64, tighter."""
    finals, statuses = {}, {}
    stacked = numbers_rank == 8
    for concurrent, rows in ((True, 64), (False, None)):
        config = _config(
            tiny_lm_dir, tmp_path / str(concurrent), prompts, concurrent=concurrent, forward_batch_rows=rows
        )
        config.policies[1] = dataclasses.replace(config.policies[1], lora_r=numbers_rank)
        trainer = MultiPolicyTrainer(config)
        if stacked:
            trainer.model.double()  # in place: the optimisers keep their parameters
        start = _lora(trainer)
        statuses[concurrent] = trainer.train()
        finals[concurrent] = _lora(trainer)
    moved = max((finals[True][k] - start[k]).abs().max().item() for k in start)
    assert moved > 1e-3  # the adapters learned something, so equality below means something
    differ = max((finals[True][k] - finals[False][k]).abs().max().item() for k in start)
    assert differ < (1e-9 if stacked else 1e-5)
    for name in ("colours", "numbers"):
        together, alone = statuses[True]["policies"][name], statuses[False]["policies"][name]
        assert together["status"] == alone["status"] == "done" and together["steps"] == 2
        for key in ("loss", "reward", "grad_norm"):
            assert together["last"][key] == pytest.approx(alone["last"][key], abs=1e-5)
    assert "kl" in statuses[True]["policies"]["numbers"]["last"]
    logged = [json.loads(line) for line in (tmp_path / "True" / "numbers" / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in logged] == [1, 2]


def test_a_failing_policy_stops_alone(tiny_lm_dir, tmp_path, prompts):
    """A NaN reward and an empty data file stop their policies with the error; the good one trains on."""
    from adapter_revisions.store import AdapterStore

    policies = [
        {"name": "good", "train_file": prompts["colours"], "seed": 1},
        {"name": "nan", "train_file": prompts["numbers"], "seed": 2, "reward": "tests.training.test_multi_policy:nan_reward"},
        {"name": "empty", "train_file": prompts["empty"], "seed": 3},
    ]  # fmt: skip
    status = MultiPolicyTrainer(_config(tiny_lm_dir, tmp_path, prompts, policies=policies, save_steps=1)).train()
    good, nan, empty = (status["policies"][n] for n in ("good", "nan", "empty"))
    assert good["status"] == "done" and good["steps"] == 2 and good["error"] is None
    assert nan["status"] == "failed" and "non-finite" in nan["error"] and nan["steps"] == 0
    assert empty["status"] == "failed" and "set-up" in empty["error"] and "no prompts" in empty["error"]
    store = AdapterStore(tmp_path / "adapters")
    assert [r.step for r in sorted(store.revisions("good"), key=lambda r: r.step)] == [1, 2]
    assert store.resolve("good").ref == good["revision"] and store.resolve("good").parent is not None
    assert "nan" not in store.policies() and json.loads((tmp_path / "policies.json").read_text()) == status


def test_cli_trains_policies_from_yaml(tiny_lm_dir, tmp_path, prompts, capsys):
    config = tmp_path / "policies.yaml"
    config.write_text(
        f"model_name_or_path: {tiny_lm_dir}\noutput_dir: {tmp_path / 'run'}\nmax_steps: 3\ndevice: cpu\n"
        "policy_defaults: {prompts_per_step: 2, num_generations: 2, max_completion_length: 4}\n"
        f"policies:\n  - {{name: pa, train_file: {prompts['colours']}}}\n"
        f"  - {{name: pb, train_file: {prompts['numbers']}, seed: 5}}\n"
    )
    assert main(["train", "policies", "--config", str(config), "max_steps=1", "logging_steps=0"]) == 0
    out = capsys.readouterr().out
    assert "pa: 1 steps → pa@" in out and "pb: 1 steps → pb@" in out
    status = json.loads((tmp_path / "run" / "policies.json").read_text())
    assert {p["steps"] for p in status["policies"].values()} == {1}

    assert main(["train", "policies", "--config", str(config), "policy_defaults={lora_rank: 4}"]) == 2
    assert "unknown PolicySpec field(s) ['lora_rank']" in capsys.readouterr().err


def test_config_errors_name_the_field(tmp_path):
    with pytest.raises(ValueError, match="loss_type must be one of"):
        MultiPolicyConfig(model_name_or_path="m", policies=[{"name": "a", "train_file": "f", "loss_type": "x"}])
    with pytest.raises(ValueError, match="names must be unique"):
        MultiPolicyConfig(model_name_or_path="m", policies=[{"name": "a", "train_file": "f"}] * 2)
    with pytest.raises(ValueError, match=r"policies\[0\]: set train_file"):
        MultiPolicyConfig(model_name_or_path="m", policies=[{"name": "a"}])
    with pytest.raises(ValueError, match="reward=judge needs judge_server_url"):
        MultiPolicyConfig(model_name_or_path="m", policies=[{"name": "a", "train_file": "f", "reward": "judge"}])
    path = tmp_path / "c.yaml"
    path.write_text("model_name_or_path: m\npolicies: []\n")
    with pytest.raises(ValueError, match="policies is required"):
        load_multi_policy_config(path)
    with pytest.raises(ValueError, match="num_generations must be >= 2"):  # TRL's rule
        MultiPolicyConfig(model_name_or_path="m", policies=[{"name": "a", "train_file": "f", "num_generations": 1}])


def test_policy_grpo_fields_are_grpo_configs():
    """PolicySpec's GRPO and optimiser fields are GRPOConfig's own: TRL's type and help, and TRL's default
    except the four sized for a small LoRA policy; the values read as TRL reads them."""
    import typing

    from trl import GRPOConfig

    from training.multi_policy.config import GRPO_FIELDS, PolicySpec

    trl, types = {f.name: f for f in dataclasses.fields(GRPOConfig)}, typing.get_type_hints(GRPOConfig)
    ours = {f.name: f for f in dataclasses.fields(PolicySpec)}
    changed = {}
    for name in GRPO_FIELDS:
        assert ours[name].type == types[name], name  # not Field.type: HfArgumentParser rewrites it in place
        assert ours[name].metadata["help"].startswith(trl[name].metadata["help"]), name
        if ours[name].default != trl[name].default:
            changed[name] = ours[name].default
    assert changed == {"seed": 0, "num_generations": 4, "max_completion_length": 32, "learning_rate": 1e-4}
    spec = PolicySpec(name="a", train_file="f", scale_rewards=False, warmup_steps=0.25)
    assert spec.scale_rewards == "none" and spec.warmup_steps_for(10) == 3  # a warm-up below 1 is a fraction


def test_reference_f1():
    completions = [[{"role": "assistant", "content": "A red circle."}], "blue", "anything"]
    assert reference_f1(completions, answer=["There is a red circle.", "red", None]) == [0.75, 0.0, None]


def test_a_judge_rewarded_policy_beside_a_local_one(tiny_lm_dir, tmp_path, prompts):
    """`reward: judge` scores through a reward server over loopback HTTP (the stand-in rule judge)."""
    from tests.support.reward_app import fresh_state, make_reward_app
    from tiny_world.servers.openai_server import serve

    state = fresh_state()
    with serve(make_reward_app(state)) as url:
        policies = [
            {"name": "judged", "train_file": prompts["colours"], "seed": 1, "reward": "judge",
             "judge_server_url": url, "reward_kwargs": {"backoff_s": 0.01}},
            {"name": "local", "train_file": prompts["numbers"], "seed": 2},
        ]  # fmt: skip
        status = MultiPolicyTrainer(_config(tiny_lm_dir, tmp_path, prompts, policies=policies, max_steps=1)).train()
    assert state["calls"] >= 2  # one listwise request per prompt group
    judged = status["policies"]["judged"]
    assert judged["status"] == "done", judged["error"]
    assert 0.0 <= judged["last"]["reward"] <= 1.0 and status["policies"]["local"]["status"] == "done"


def test_init_from_continues_a_store_revision(tiny_lm_dir, tmp_path, prompts):
    """A policy starts from its store revision's weights and shape; exports name it as parent; a bad ref
    stops only its own policy."""
    from adapter_revisions.store import AdapterStore

    first = MultiPolicyTrainer(_config(tiny_lm_dir, tmp_path, prompts, policies=[
        {"name": "colours", "train_file": prompts["colours"], "seed": 1}]))  # fmt: skip
    first.train()
    trained = _lora(first)
    store = AdapterStore(tmp_path / "adapters")
    parent = store.resolve("colours").ref

    policies = [
        {"name": "colours", "train_file": prompts["colours"], "seed": 7, "init_from": "colours", "lora_r": 2},
        {"name": "lost", "train_file": prompts["numbers"], "seed": 2, "init_from": "nobody@prod"},
    ]
    second = MultiPolicyTrainer(_config(tiny_lm_dir, tmp_path, prompts, policies=policies, max_steps=1))
    start = {k: v for k, v in _lora(second).items() if ".colours." in k}
    assert start.keys() == {k for k in trained if ".colours." in k}  # the revision's rank, not lora_r=2
    assert all(torch.equal(start[k], trained[k]) for k in start)
    status = second.train()
    assert status["policies"]["colours"]["status"] == "done"
    assert store.resolve(status["policies"]["colours"]["revision"]).parent == parent
    lost = status["policies"]["lost"]
    assert (
        lost["status"] == "failed" and "init_from 'nobody@prod'" in lost["error"] and "unknown policy" in lost["error"]
    )

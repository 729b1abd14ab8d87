"""A LoRA run's output is usable by the next step: judge, merge, eval, serve and GRPO, through the real CLI.

One LoRA SFT run (real TRL, a few steps on the synthetic world) writes the adapter folder every test here
starts from; `mrjudge adapters merge` turns it into the full model folder the merged-side tests use.
"""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import httpx
import pytest
import torch
from mrjudge.cli import main
from safetensors.torch import load_file

from tests.support.reward_server import mrjudge_serve
from tests.support.training import CPU

JUDGE = ["--device", "cpu", "--max-new-tokens", "12", "--orders", "1", "--batch-size", "4"]


@pytest.fixture(scope="module")
def sft_adapter(tiny_vlm_dir, synth_data, tmp_path_factory):
    """`mrjudge train sft use_lora=true`: an adapter folder, with a rate high enough to move the outputs."""
    out = tmp_path_factory.mktemp("sft-lora")
    args = ["train", "sft", f"model_name_or_path={tiny_vlm_dir}", f"train_file={synth_data / 'sft' / 'train.jsonl'}",
            f"output_dir={out}", "max_steps=3", "per_device_train_batch_size=4", "learning_rate=0.02",
            "max_length=null", "save_strategy=no", "use_lora=true", "lora_r=4", "lora_alpha=16", *CPU]  # fmt: skip
    assert main(args) == 0
    return out


@pytest.fixture(scope="module")
def items(synth_data, tmp_path_factory):
    """Four MC items from the synthetic world, with their images beside them."""
    folder = tmp_path_factory.mktemp("items")
    rows = [json.loads(line) for line in (synth_data / "rl" / "val.jsonl").read_text().splitlines()[:4]]
    for row in rows:
        source = synth_data / "rl" / row["image"]
        (folder / row["image"]).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, folder / row["image"])
    path = folder / "items.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _judge(model: str | Path, items: Path, out: Path, *extra: str) -> list[dict]:
    assert main(["judge", "--model", str(model), "--input", str(items), "--output", str(out), *JUDGE, *extra]) == 0
    return [json.loads(line) for line in out.read_text().splitlines()]


@pytest.fixture(scope="module")
def adapter_verdicts(sft_adapter, items, tmp_path_factory):
    return _judge(sft_adapter, items, tmp_path_factory.mktemp("judged") / "adapter.jsonl")


@pytest.fixture(scope="module")
def merged(sft_adapter, tmp_path_factory):
    out = tmp_path_factory.mktemp("merge") / "judge-sft-merged"
    assert main(["adapters", "merge", str(sft_adapter), "--out", str(out)]) == 0
    return out


def _logits(model, processor):
    from PIL import Image

    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Which is best? A or B"}]}]
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    inputs = processor(text=[text], images=[Image.new("RGB", (56, 56), (200, 40, 40))], return_tensors="pt")
    with torch.no_grad():
        return model(**inputs).logits


# -- the adapter folder as a model ---------------------------------------------------------------------------


def test_sft_writes_an_adapter_naming_its_base_by_absolute_path(sft_adapter, tiny_vlm_dir):
    config = json.loads((sft_adapter / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(Path(tiny_vlm_dir).resolve())
    assert not (sft_adapter / "config.json").exists(), "an adapter folder, which transformers alone cannot load"


def test_load_model_merges_the_adapter_exactly(sft_adapter, tiny_vlm_dir):
    from peft import PeftModel

    from judge.models import load_model

    merged = load_model(str(sft_adapter), device="cpu")
    assert merged.adapter is not None and merged.adapter.base == str(Path(tiny_vlm_dir).resolve())
    assert not hasattr(merged.model, "peft_config"), "plain weights: the backends' adapter slots stay free"
    base = load_model(str(tiny_vlm_dir), device="cpu")
    unmerged = PeftModel.from_pretrained(load_model(str(tiny_vlm_dir), device="cpu").model, str(sft_adapter)).eval()
    got = _logits(merged.model, merged.processor)
    torch.testing.assert_close(got, _logits(unmerged, base.processor), atol=1e-4, rtol=1e-4)
    assert (got - _logits(base.model, base.processor)).abs().max() > 1e-2, "the adapter changes the model"


def test_judge_cli_takes_the_adapter_folder(adapter_verdicts, items):
    assert [v["id"] for v in adapter_verdicts] == [json.loads(line)["id"] for line in items.read_text().splitlines()]
    assert all(v["raw"] for v in adapter_verdicts)


def test_a_moved_base_is_named_with_the_fix_and_base_overrides_it(sft_adapter, tiny_vlm_dir, items, tmp_path, capsys):
    moved = tmp_path / "adapter"
    shutil.copytree(sft_adapter, moved)
    config = json.loads((moved / "adapter_config.json").read_text())
    for where in (str(tmp_path / "gone" / "tiny"), "runs/old/tiny-judge"):  # absolute, relative
        (moved / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": where}))
        assert main(["judge", "--model", str(moved), "--input", str(items), "--output", str(tmp_path / "v.jsonl")]) == 2
        err = capsys.readouterr().err
        assert "base_model_name_or_path" in err and where in err and "--base" in err
    assert not (tmp_path / "v.jsonl").exists()
    copy = tmp_path / "base-elsewhere"
    shutil.copytree(tiny_vlm_dir, copy)
    assert _judge(moved, items, tmp_path / "v.jsonl", "--base", str(copy))  # the override loads


def test_base_without_an_adapter_and_with_a_server_is_refused(tiny_vlm_dir, items, tmp_path, capsys):
    out = str(tmp_path / "v.jsonl")
    assert main(["judge", "--model", str(tiny_vlm_dir), "--base", str(tiny_vlm_dir), "--input", str(items),
                 "--output", out]) == 2  # fmt: skip
    assert "not a PEFT adapter folder" in capsys.readouterr().err
    assert (
        main(["judge", "--model", "http://127.0.0.1:9/v1", "--base", "x", "--input", str(items), "--output", out]) == 2
    )
    assert "--base goes with a local adapter folder" in capsys.readouterr().err


# -- merged to a full model folder ---------------------------------------------------------------------------


def test_merge_writes_a_full_model_folder_that_judges_alike(merged, sft_adapter, items, adapter_verdicts, tmp_path):
    from adapter_revisions.merge import MERGE_RECORD

    names = {p.name for p in merged.iterdir()}
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
            "processor_config.json", "chat_template.jinja", MERGE_RECORD} <= names  # fmt: skip
    assert "adapter_config.json" not in names and not [n for n in merged.parent.iterdir() if n.name.startswith(".")]
    record = json.loads((merged / MERGE_RECORD).read_text())
    assert record["adapter"] == str(sft_adapter.resolve()) and record["r"] == 4 and record["dtype"] == "float32"
    weights = load_file(str(merged / "model.safetensors"))
    assert weights and not any("lora" in key for key in weights)
    verdicts = _judge(merged, items, tmp_path / "merged.jsonl")
    assert [(v["choice"], v["raw"]) for v in verdicts] == [(v["choice"], v["raw"]) for v in adapter_verdicts]


def test_merge_refuses_an_existing_folder_and_a_full_model(merged, sft_adapter, tiny_vlm_dir, capsys):
    assert main(["adapters", "merge", str(sft_adapter), "--out", str(merged)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["adapters", "merge", str(tiny_vlm_dir), "--out", str(merged.parent / "x")]) == 2
    assert "not a PEFT adapter folder" in capsys.readouterr().err and not (merged.parent / "x").exists()


def test_eval_from_the_merged_folder(merged, tmp_path):
    from tests.eval.fixtures import write_vlrb_jsonl

    data = write_vlrb_jsonl(tmp_path / "data")
    args = ["eval", "vl-rewardbench", "--model", str(merged), "--data", str(data), "--out", str(tmp_path / "run"),
            "--quiet", "--device", "cpu", "--max-new-tokens", "12", "--batch-size", "8", "--limit", "4"]  # fmt: skip
    assert main(args) == 0
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["n"] == 4  # a few SFT steps write no parsable answer yet: scored as unparsed, not wrong
    assert len((tmp_path / "run" / "predictions.jsonl").read_text().splitlines()) == 4


@pytest.mark.slow  # `mrjudge serve` in a subprocess: 80 s under load (7 agents on 2 cores)
def test_serve_from_the_merged_folder_matches_the_cli_judge(merged, items, adapter_verdicts):
    row = json.loads(items.read_text().splitlines()[0])
    with open(items.parent / row.pop("image"), "rb") as image:
        row["image"] = "data:image/png;base64," + base64.b64encode(image.read()).decode()
    with mrjudge_serve("--model", str(merged), *JUDGE) as base:
        response = httpx.post(f"{base}/v1/judge", json={"items": [row]}, timeout=120)
    assert response.status_code == 200, response.text
    (verdict,) = response.json()["verdicts"]
    assert (verdict["choice"], verdict["raw"]) == (adapter_verdicts[0]["choice"], adapter_verdicts[0]["raw"])


# -- training from either --------------------------------------------------------------------------------------

GRPO = ["max_steps=1", "per_device_train_batch_size=4", "num_generations=4", "max_completion_length=8",
        "save_strategy=no", *CPU]  # fmt: skip


def test_judge_grpo_from_the_merged_folder(merged, tiny_vlm_dir, synth_data, tmp_path):
    out = tmp_path / "grpo"
    assert main(["train", "grpo", f"model_name_or_path={merged}", f"train_file={synth_data / 'rl' / 'train.jsonl'}",
                 f"output_dir={out}", "learning_rate=0.001", *GRPO]) == 0  # fmt: skip
    start, after = load_file(str(merged / "model.safetensors")), load_file(str(out / "model.safetensors"))
    base = load_file(str(tiny_vlm_dir / "model.safetensors"))
    # One step of 8-token completions earns no reward (all clipped), so no advantage and no update: the
    # saved weights are the merged ones the run started from, which are not the base's.
    assert start.keys() == after.keys() and all(torch.equal(start[k], after[k]) for k in start)
    assert any(not torch.equal(start[k], base[k]) for k in base)


@pytest.mark.slow  # 40 s under load (7 agents on 2 cores)
def test_judge_grpo_continues_the_sft_adapter(sft_adapter, tiny_vlm_dir, synth_data, items, tmp_path):
    from training.config import load_config
    from training.grpo import JudgeGRPOConfig, build_grpo_trainer

    out = tmp_path / "grpo-lora"
    args = [f"model_name_or_path={sft_adapter}", "use_lora=true", "lora_r=8", "beta=0.04",
            f"train_file={synth_data / 'rl' / 'train.jsonl'}", f"output_dir={out}", "learning_rate=0.02", *GRPO]  # fmt: skip
    with pytest.warns(UserWarning, match="not used: lora_r=8"):
        trainer = build_grpo_trainer(load_config(JudgeGRPOConfig, None, args))
    trainable = [name for name, param in trainer.model.named_parameters() if param.requires_grad]
    assert trainable and all("lora_" in name and ".default." in name for name in trainable)
    assert "ref" in trainer.model.peft_config, "beta > 0: TRL keeps a frozen copy of the SFT adapter as reference"
    del trainer
    with pytest.warns(UserWarning, match="not used: lora_r=8"):
        assert main(["train", "grpo", *args]) == 0
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["r"] == 4, "the SFT adapter's own rank, not lora_r"
    assert config["base_model_name_or_path"] == str(Path(tiny_vlm_dir).resolve())
    sft, grpo = (
        load_file(str(sft_adapter / "adapter_model.safetensors")),
        load_file(str(out / "adapter_model.safetensors")),
    )
    assert sft.keys() == grpo.keys(), "the same adapter, saved as the run's output"
    # PEFT saves every adapter: TRL's frozen reference copy lands in ref/, the trained one at the top.
    ref = load_file(str(out / "ref" / "adapter_model.safetensors"))
    assert ref.keys() == sft.keys() and all(torch.equal(ref[k], sft[k]) for k in sft)
    assert _judge(out, items, tmp_path / "v.jsonl"), "and the next step loads it too"


def test_full_fine_tuning_from_an_adapter_merges_it_first(sft_adapter, synth_data, merged, tmp_path):
    out = tmp_path / "full"
    assert main(["train", "sft", f"model_name_or_path={sft_adapter}", f"train_file={synth_data / 'sft' / 'train.jsonl'}",
                 f"output_dir={out}", "max_steps=1", "per_device_train_batch_size=4", "learning_rate=0.0",
                 "max_length=null", "save_strategy=no", *CPU]) == 0  # fmt: skip
    merged_weights, trained = load_file(str(merged / "model.safetensors")), load_file(str(out / "model.safetensors"))
    # learning_rate 0: the saved weights are exactly the merge the run started from
    assert merged_weights.keys() == trained.keys()
    assert all(torch.equal(merged_weights[k], trained[k]) for k in merged_weights)


def test_policy_grpo_continues_the_adapter_with_the_adapter_as_judge(sft_adapter, tmp_path):
    from data_synthesis.world import write_world

    world = write_world(8, 0, tmp_path / "world", size=56) / "records.jsonl"
    out = tmp_path / "policy"
    args = ["train", "policy", f"model_name_or_path={sft_adapter}", "use_lora=true", f"reward.model={sft_adapter}",
            "reward.judge.max_new_tokens=8", f"train_file={world}", f"output_dir={out}", "max_steps=1",
            "per_device_train_batch_size=4", "num_generations=4", "max_completion_length=8", "learning_rate=0.02",
            "use_vllm=false", "save_strategy=no", *CPU]  # fmt: skip
    assert main(args) == 0
    sft, policy = (
        load_file(str(sft_adapter / "adapter_model.safetensors")),
        load_file(str(out / "adapter_model.safetensors")),
    )
    assert sft.keys() == policy.keys(), "the SFT adapter, continued as the policy"
    assert json.loads((out / "adapter_config.json").read_text())["r"] == 4

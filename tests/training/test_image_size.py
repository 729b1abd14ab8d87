"""`min_pixels` / `max_pixels` in the SFT, judge-GRPO and policy-GRPO configs reach the processor TRL batches
with, and the saved processor keeps them.

The synthetic world's images are 112x112 (12,544 pixels: 8x8 patches, 16 visual tokens on the tiny judge);
`max_pixels=3136` makes them 56x56 (4x4 patches, 4 tokens).
"""

from __future__ import annotations

import pytest

from judge.models import load_processor
from tests.support.training import CPU, grpo_config
from training.config import load_config
from training.grpo import build_grpo_trainer
from training.policy import JudgePolicyGRPOConfig, build_policy_trainer
from training.sft import JudgeSFTConfig, build_sft_trainer, run_sft

CAP = 3136


def _longest_edge(processor) -> int:
    return processor.image_processor.size["longest_edge"]


def _grid(trainer) -> list[list[int]]:
    batch = next(iter(trainer.get_train_dataloader()))
    return batch["image_grid_thw"].tolist()


def test_sft_batches_with_max_pixels_and_saves_it(tiny_vlm_dir, synth_data, tmp_path):
    def config(*extra):
        return load_config(
            JudgeSFTConfig,
            None,
            [f"model_name_or_path={tiny_vlm_dir}", f"train_file={synth_data / 'sft' / 'train.jsonl'}",
             f"output_dir={tmp_path}", "per_device_train_batch_size=2", "max_length=null", "max_steps=1",
             "save_strategy=no", *CPU, *extra],
        )  # fmt: skip

    capped = config(f"max_pixels={CAP}")
    trainer = build_sft_trainer(capped)
    assert _longest_edge(trainer.processing_class) == CAP
    assert _grid(trainer) == [[1, 4, 4]] * 2
    image = trainer.train_dataset[0]["images"][0]
    assert image.size == (112, 112)  # the processor's own range would keep all of it:
    assert load_processor(str(tiny_vlm_dir)).image_processor(images=[image])["image_grid_thw"].tolist() == [[1, 8, 8]]
    run_sft(capped)  # one step, then the judge and its processor are saved
    assert _longest_edge(load_processor(str(tmp_path))) == CAP  # what eval, serve and GRPO then load


def test_judge_grpo_and_policy_grpo_take_it_too(tiny_vlm_dir, synth_data, tmp_path):
    grpo = grpo_config(
        tiny_vlm_dir, synth_data, tmp_path, "max_completion_length=8", "use_vllm=false", f"max_pixels={CAP}",
        "min_pixels=784", "save_strategy=no",
    )  # fmt: skip
    processor = build_grpo_trainer(grpo).processing_class
    assert (processor.image_processor.size["shortest_edge"], _longest_edge(processor)) == (784, CAP)

    world = synth_data / "records.jsonl"
    policy = load_config(
        JudgePolicyGRPOConfig,
        None,
        [f"model_name_or_path={tiny_vlm_dir}", f"train_file={world}", f"output_dir={tmp_path}",
         "reward.url=http://judge:8000", "per_device_train_batch_size=4", "num_generations=4",
         "max_completion_length=8", "use_vllm=false", f"max_pixels={CAP}", "save_strategy=no", *CPU],
    )  # fmt: skip
    trainer = build_policy_trainer(policy)
    assert _longest_edge(trainer.processing_class) == CAP
    [reward] = trainer.reward_funcs
    assert reward.max_pixels == CAP  # images go to the judge server at the policy's size


@pytest.mark.parametrize(
    "override, match",
    [("max_pixels=100", r"max_pixels \(100\) must be an integer of at least 784"), ("min_pixels=-1", "min_pixels")],
)
def test_a_bad_range_fails_when_the_config_loads(tiny_vlm_dir, tmp_path, override, match):
    with pytest.raises(ValueError, match=match):
        load_config(
            JudgeSFTConfig,
            None,
            [f"model_name_or_path={tiny_vlm_dir}", "train_file=x.jsonl", f"output_dir={tmp_path}", override, *CPU],
        )

"""A stage reads only the config fields its hash covers (`tiny_world.demo.stages.hashed`), in milliseconds.

The quick demo of `test_demo.py` runs every stage through this window, so a stage that reads a field its hash
leaves out fails there; these tests pin the window itself: plain reads, reads inside the recipe's steps and
properties, and the fields a stage inherits from the stages it builds on.
"""

from __future__ import annotations

from dataclasses import fields, replace

import pytest

from tiny_world.demo.config import DemoConfig, load_demo_config
from tiny_world.demo.stages import STAGES, HashedConfig, Stage, UnhashedRead, hashed_fields
from tiny_world.recipe import TRACE_TOKENS


def _stage(name: str, fields: tuple[str, ...], after: tuple[str, ...] = ()) -> Stage:
    return Stage(name=name, title=name, fields=fields, after=after, run=lambda ctx: {}, line=lambda f: "")


def _window(stage: str, config: DemoConfig | None = None) -> HashedConfig:
    return HashedConfig(config or load_demo_config(quick=True), stage, hashed_fields(stage, STAGES))


def test_every_stage_lists_real_fields_and_earlier_stages():
    names = {f.name for f in fields(DemoConfig)}
    seen: list[str] = []
    for stage in STAGES:
        assert set(stage.fields) <= names, (stage.name, set(stage.fields) - names)
        assert set(stage.after) <= set(seen), (stage.name, stage.after)  # a stage builds only on earlier ones
        seen.append(stage.name)


def test_a_stage_covers_its_own_fields_and_those_of_every_stage_it_builds_on():
    stages = (_stage("a", ("seed",)), _stage("b", ("world_n",), ("a",)), _stage("c", ("bon_n",), ("b",)))
    assert hashed_fields("c", stages) == {"seed", "world_n", "bon_n"}
    assert hashed_fields("a", stages) == {"seed"}
    assert hashed_fields("best_of_n", STAGES) >= {"bon_n", "sft_max_steps", "kinds"}  # through grpo, sft, world
    assert "bon_n" not in hashed_fields("policy", STAGES)  # best_of_n is not upstream of the policy


def test_a_read_the_hash_does_not_cover_fails_and_says_where_to_add_it():
    config = load_demo_config(quick=True)
    window = _window("negatives", config)
    assert (window.negatives_n, window.world_n) == (config.negatives_n, config.world_n)  # its own; world's
    with pytest.raises(UnhashedRead, match=r"stage 'negatives' read config\.sft_max_steps.*add 'sft_max_steps'"):
        _ = window.sft_max_steps
    with pytest.raises(UnhashedRead):  # not an AttributeError: a default must not quietly stand in for it
        getattr(window, "threads", None)
    with pytest.raises(AttributeError):
        _ = window.no_such_field


def test_the_recipes_steps_and_properties_read_through_the_window():
    """`config.recipe()` is the window: the recipe's own code runs with it as `self`, so its reads count."""
    config = load_demo_config(overrides={"judge_max_new_tokens": None}, quick=True)
    # reasoner_style: the budget of a judge with no judge_max_new_tokens (the full demo's), covered via distill.
    assert _window("evaluate", config).recipe().max_new_tokens == TRACE_TOKENS[config.reasoner_style]
    stages = (_stage("judge", ("judge_max_new_tokens", "eval_batch_size")),)
    blind = HashedConfig(config, "judge", hashed_fields("judge", stages))
    with pytest.raises(UnhashedRead, match="reasoner_style"):
        _ = blind.recipe().max_new_tokens
    with pytest.raises(UnhashedRead, match="reasoner_style"):
        blind.recipe().judge("model", image_root=None, batch_size=blind.eval_batch_size)
    fixed = HashedConfig(replace(config, judge_max_new_tokens=40), "judge", hashed_fields("judge", stages))
    assert fixed.recipe().max_new_tokens == 40  # the layout's budget is not read, so it need not be covered
    grpo = _window("grpo", config).recipe().trainer_fields("grpo")
    assert grpo == config.recipe().trainer_fields("grpo")  # the same values as the recipe's own
    with pytest.raises(UnhashedRead, match="stage 'sft' read config.grpo_max_steps"):
        _window("sft", config).recipe().trainer_fields("grpo")

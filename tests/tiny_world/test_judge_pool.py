"""Judge GRPO's own pool: disjoint from SFT's world, every negative in both orders, filtered as it says."""

from __future__ import annotations

import pytest

from jobs.jsonl import read_jsonl
from judge.types import Verdict
from tiny_world import judge_pool
from tiny_world.recipe import TinyJudgeRecipe, write_kind_world


@pytest.fixture(scope="module")
def worlds(tmp_path_factory):
    from data_synthesis.pipeline import load_rows

    out = tmp_path_factory.mktemp("pool")
    recipe = TinyJudgeRecipe(kinds=["attribute", "count"], world_n=40, negatives_n=3)
    write_kind_world(out / "sft-world", out / "sft", kinds=recipe.kinds, n=40, seed=recipe.seed)
    sft_rows = load_rows(out / "sft", "records", out / "sft")
    # Exclude one key the pool world really draws too, as well as SFT's: the exclusion must bite.
    pool_all = judge_pool.write_pool_world(recipe, out / "pool-all", 40)
    exclude = {judge_pool.content_key(r) for r in sft_rows} | {judge_pool.content_key(pool_all[0])}
    pool = judge_pool.write_pool_world(recipe, out / "pool", 40, exclude=exclude)
    return recipe, sft_rows, pool_all, pool, out


def test_pool_is_disjoint_from_the_sft_world(worlds):
    _, sft_rows, pool_all, pool, _ = worlds
    sft_keys = {judge_pool.content_key(r) for r in sft_rows}
    assert pool and not sft_keys & {judge_pool.content_key(r) for r in pool}
    assert judge_pool.content_key(pool_all[0]) not in {judge_pool.content_key(r) for r in pool}
    assert len(pool) == len(pool_all) - 1  # exactly the excluded record is gone
    assert all(len(r["negatives"]) == 3 for r in pool)


def test_every_negative_in_both_orders(worlds):
    _, _, _, pool, _ = worlds
    pairs = judge_pool.all_pairs(pool[:5])
    assert len(pairs) == 15 and all(
        p.label == 0 and p.candidates[0] == r["answer"]
        for p, r in zip(pairs, [row for row in pool[:5] for _ in row["negatives"]])
    )
    assert {p.candidates[1] for p in pairs} == {n["text"] for r in pool[:5] for n in r["negatives"]}
    ordered = judge_pool.both_orders(pairs)
    assert len(ordered) == 30
    assert ordered[1].candidates == pairs[0].candidates[::-1] and ordered[1].label == 1
    assert ordered[1].candidates[ordered[1].label] == pool[0]["answer"]


def test_dev_split_is_seeded_and_disjoint(worlds):
    _, _, _, pool, _ = worlds
    rest, dev = judge_pool.split_dev(pool, 0.25, seed=0)
    assert len(dev) == round(0.25 * len(pool)) and len(rest) + len(dev) == len(pool)
    assert not {r["id"] for r in rest} & {r["id"] for r in dev}
    assert judge_pool.split_dev(pool, 0.25, seed=0) == (rest, dev)


def _verdict(item_id, choice, consistent):
    return Verdict(item_id, choice, None, consistent, [choice, choice], "", ["", ""])


def test_filter_keeps_wrong_inconsistent_and_as_many_right(worlds):
    _, _, _, pool, _ = worlds
    pairs = judge_pool.all_pairs(pool[:6])  # 18 pairs, label 0
    verdicts = [_verdict(p.id, 0, True) for p in pairs]
    verdicts[2] = _verdict(pairs[2].id, 1, True)  # wrong
    verdicts[5] = _verdict(pairs[5].id, 0, False)  # right but inconsistent
    verdicts[9] = _verdict(pairs[9].id, None, None)  # undecided
    kept, figures = judge_pool.filter_pool(pairs, verdicts, seed=0)
    hard = {pairs[i].id for i in (2, 5, 9)}
    assert hard <= {p.id for p in kept}
    assert len(kept) == 6 and figures["hard"] == 3 and figures["kept"] == 6 and figures["n"] == 18
    assert figures["sft_accuracy"] == pytest.approx((16 + 0.5) / 18, abs=1e-4)  # inconsistent but right counts 1
    assert [p.id for p in kept] == [p.id for p in pairs if p.id in {k.id for k in kept}]  # input order
    assert judge_pool.filter_pool(pairs, verdicts, seed=0)[0] == kept  # seeded


def test_pool_files_are_what_the_trainers_read(worlds):
    from training.data import load_grpo_dataset, load_sft_dataset

    recipe, _, _, pool, out = worlds
    pairs = judge_pool.all_pairs(pool[:3])
    assert judge_pool.write_pool_items(pairs, out / "rl.jsonl") == 18
    rows = [row for _, row in read_jsonl(out / "rl.jsonl")]
    assert "world" not in rows[0]["meta"] and rows[1]["label"] == 1
    dataset = load_grpo_dataset(out / "rl.jsonl")
    assert len(dataset) == 18 and dataset[1]["label"] == 1
    assert judge_pool.write_pool_sft(pairs, out / "sft.jsonl", recipe.reasoner_style) == {"examples": 18}
    examples = [row for _, row in read_jsonl(out / "sft.jsonl")]
    # The trace is the scene reasoner's: it picks the reference in either display order.
    assert examples[0]["messages"][-1]["content"][0]["text"].endswith("<answer>A</answer>")
    assert examples[1]["messages"][-1]["content"][0]["text"].endswith("<answer>B</answer>")
    assert len(load_sft_dataset(out / "sft.jsonl")) == 18


def test_grpos_pool_may_hold_items_without_a_trace_and_sfts_may_not(worlds):
    """Distilled traces: items whose trace the paper's filter dropped stay in GRPO's pool (it needs only the
    label) and are left out of the more-SFT control's examples."""
    from training.data import load_sft_dataset

    recipe, _, _, pool, out = worlds
    pairs = judge_pool.all_pairs(pool)
    items = judge_pool.write_pool_items(pairs, out / "rl-distilled.jsonl")
    figures = judge_pool.write_pool_sft(
        pairs, out / "sft-distilled.jsonl", "checks", traces="distilled", describe_error_rate=0.4, seed=5
    )
    rl_ids = {row["id"] for _, row in read_jsonl(out / "rl-distilled.jsonl")}
    sft_ids = {row["id"] for _, row in read_jsonl(out / "sft-distilled.jsonl")}
    dropped = set(figures["dropped"])
    assert dropped and dropped <= rl_ids and not dropped & sft_ids
    assert len(rl_ids) == items == figures["items"] and len(sft_ids) == figures["kept"] == items - len(dropped)
    assert sum(figures["drop_reasons"].values()) == len(dropped)
    assert abs(figures["measured_error_rate"] - 0.4) < 0.1 and 0 < figures["false_fact_share"] <= 1
    assert len(load_sft_dataset(out / "sft-distilled.jsonl")) == figures["kept"]
    seeded = judge_pool.distilled_pool_sft(pairs, "checks", 0.4, 5)[1]
    assert seeded == {k: v for k, v in figures.items() if k != "examples"}
    ignored = judge_pool.write_pool_sft(
        pairs, out / "sft-ignore.jsonl", "checks", traces="distilled", describe_error_rate=0.4, reasoner_hint="ignore"
    )
    assert ignored["kept"] < figures["kept"] and "unparsed" in ignored["drop_reasons"]


def test_the_recipe_refuses_an_error_rate_its_traces_do_not_use():
    with pytest.raises(ValueError, match="describe_error_rate.*traces=distilled"):
        TinyJudgeRecipe(describe_error_rate=0.1)
    with pytest.raises(ValueError, match="traces must be one of"):
        TinyJudgeRecipe(traces="distiled")
    assert TinyJudgeRecipe(traces="distilled", describe_error_rate=0.1).describe_error_rate == 0.1
    with pytest.raises(ValueError, match="reasoner_hint.*traces=distilled"):
        TinyJudgeRecipe(reasoner_hint="ignore")
    with pytest.raises(ValueError, match="reasoner_hint must be one of"):
        TinyJudgeRecipe(traces="distilled", reasoner_hint="trust")

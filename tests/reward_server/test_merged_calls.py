"""A batch over several adapters runs one generation per round (`reward_server.merged_calls`)."""

from __future__ import annotations

import threading

import pytest

from judge.backends.base import ChatRequest, Generation, SamplingParams
from reward_server.merged_calls import MergedCalls, run_merged

GREEDY = SamplingParams(max_new_tokens=4)


class EchoBackend:
    """Answers each row with its first message's text; records the rows of each call and the thread it ran on."""

    name = "echo"

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[list[str]] = []
        self.threads: set[int] = set()
        self.fail = fail

    def generate(self, requests, params):
        self.calls.append([r.messages[0]["content"] for r in requests])
        self.threads.add(threading.get_ident())
        if self.fail:
            raise RuntimeError("the engine is gone")
        return [Generation(text=r.messages[0]["content"]) for r in requests]


def rows(*texts: str) -> list[ChatRequest]:
    return [ChatRequest(messages=[{"role": "user", "content": t}]) for t in texts]


def caller(*rounds: list[str], params: SamplingParams = GREEDY):
    """Work that makes one backend call per round and returns what came back."""

    def work(backend):
        return [[g.text for g in backend.generate(rows(*texts), params)] for texts in rounds]

    return work


def test_callers_rounds_share_one_backend_call_until_a_caller_is_done():
    backend = EchoBackend()
    results = run_merged([caller(["a1", "a2"], ["a3"]), caller(["b1"]), caller(["c1"], ["c2"], ["c3"])], backend)
    assert results == [[["a1", "a2"], ["a3"]], [["b1"]], [["c1"], ["c2"], ["c3"]]]
    assert [sorted(call) for call in backend.calls] == [["a1", "a2", "b1", "c1"], ["a3", "c2"], ["c3"]]
    assert backend.threads == {threading.get_ident()}  # the judge's own thread makes every backend call


def test_one_caller_runs_on_the_backend_itself():
    backend = EchoBackend()
    seen = []
    assert run_merged([lambda b: seen.append(b) or "done"], backend) == ["done"]
    assert seen == [backend]


def test_greedy_calls_merge_whatever_their_seeds_and_sampled_ones_only_with_their_own():
    backend = EchoBackend()
    run_merged([caller(["a"], params=SamplingParams(seed=1)), caller(["b"], params=SamplingParams(seed=2))], backend)
    assert len(backend.calls) == 1
    backend = EchoBackend()
    hot = [SamplingParams(temperature=0.7, seed=s) for s in (1, 2, 1)]
    run_merged([caller(["a"], params=hot[0]), caller(["b"], params=hot[1]), caller(["c"], params=hot[2])], backend)
    assert sorted(sorted(call) for call in backend.calls) == [["a", "c"], ["b"]]


def test_a_failing_backend_fails_every_caller_of_that_call_and_a_failing_caller_blocks_nobody():
    with pytest.raises(RuntimeError, match="the engine is gone"):
        run_merged([caller(["a"]), caller(["b"])], EchoBackend(fail=True))

    def broken(backend):
        raise ValueError("bad item")

    backend = EchoBackend()
    finished = threading.Event()

    def after(backend_):
        result = caller(["a"], ["b"])(backend_)
        finished.set()
        return result

    with pytest.raises(ValueError, match="bad item"):
        run_merged([broken, after], backend)
    assert finished.is_set() and backend.calls == [["a"], ["b"]]


def test_other_attributes_are_the_backends():
    assert MergedCalls(EchoBackend(), callers=2).name == "echo"


def test_a_server_batch_over_three_adapters_is_one_generation_with_each_adapters_answers(tiny_vlm_dir, tmp_path):
    """`make_run_batch` over the base and two revisions: one `model.generate`, and each item's verdict is the one
    its revision gives alone."""
    from adapter_revisions import AdapterStore, base_fingerprint
    from adapter_revisions.pool import AdapterPool
    from judge.judging import Judge, JudgeConfig
    from reward_server.work import JudgeWork, make_run_batch
    from tests.support.adapters import lora_model, served_copy
    from tests.support.items import make_items

    backend = served_copy(tiny_vlm_dir)
    store = AdapterStore(tmp_path / "store")
    revisions = [store.save("judge", lora_model(tiny_vlm_dir, seed)) for seed in (1, 2)]
    pool = AdapterPool(backend, store, base_fingerprint=base_fingerprint(backend.loaded.model), capacity=4)
    run_batch = make_run_batch(Judge(backend, JudgeConfig(orders=2, max_new_tokens=8)), max_options=4, pool=pool)
    items = make_items(3, seed=3)
    payloads = [JudgeWork([items[0]]), JudgeWork([items[1]], revisions[0]), JudgeWork([items[2]], revisions[1])]
    alone = [run_batch([p])[0][0] for p in payloads]

    model = backend.loaded.model
    generate, sizes = model.generate, []

    def counted(*args, **kwargs):
        sizes.append(len(kwargs["input_ids"]))
        return generate(*args, **kwargs)

    model.generate = counted
    together = [verdicts[0] for verdicts in run_batch(payloads)]
    assert sizes == [6]  # three items, two display orders each, one generation
    assert [v.raw for v in together] == [v.raw for v in alone]
    assert len({tuple(v.raw) for v in together}) == 3  # the adapters do answer differently

"""The adapter store, base fingerprints, the serving pool and adapters in the transformers backend."""

from __future__ import annotations

import json
import threading

import pytest
import torch
from mrjudge.cli import main as cli

from adapter_revisions import AdapterStore, AdapterStoreError, BaseMismatchError, base_fingerprint, check_base
from adapter_revisions.pool import AdapterPool
from judge.backends.base import ChatRequest, SamplingParams
from judge.prompt import build_messages
from tests.support.adapters import lora_model, served_copy
from tests.support.items import make_items

GREEDY = SamplingParams(max_new_tokens=12)


@pytest.fixture(scope="module")
def adapters(tiny_vlm_dir):
    """Two differently seeded LoRA models over the same tiny base."""
    return {seed: lora_model(tiny_vlm_dir, seed) for seed in (1, 2)}


@pytest.fixture
def store(tmp_path):
    return AdapterStore(tmp_path / "store")


def _requests(adapter=None, n=2):
    return [
        ChatRequest(messages=build_messages(i.question, i.candidates), images=[i.image], adapter=adapter)
        for i in make_items(n, seed=5)
    ]


def _texts(backend, adapter=None):
    return [g.text for g in backend.generate(_requests(adapter), GREEDY)]


# -- fingerprints ---------------------------------------------------------------------------------------------


def test_fingerprint_ignores_the_peft_wrapper_and_dtype_but_not_the_weights(tiny_vlm_dir, adapters, tmp_path):
    from judge.models import load_model
    from tiny_world.model import build_tiny_model

    bare = load_model(str(tiny_vlm_dir), device="cpu").model
    fingerprint = base_fingerprint(bare)
    assert fingerprint.startswith("sha256:")
    assert base_fingerprint(adapters[1]) == base_fingerprint(adapters[2]) == fingerprint
    assert base_fingerprint(load_model(str(tiny_vlm_dir), device="cpu", dtype="bfloat16").model) == fingerprint
    other = build_tiny_model(tmp_path / "other", kind="vlm", seed=1)
    assert base_fingerprint(load_model(str(other), device="cpu").model) != fingerprint
    with torch.no_grad():
        next(bare.parameters()).view(-1)[0] += 1.0  # one sampled value of one tensor
    assert base_fingerprint(bare) != fingerprint
    huge = torch.nn.Embedding(2**24 + 3, 1)  # sample positions must not round past the end
    assert base_fingerprint(huge).startswith("sha256:")


# -- the store ------------------------------------------------------------------------------------------------


def test_revision_round_trip_restores_the_adapter_exactly(store, adapters, tiny_vlm_dir):
    from peft import PeftModel

    from judge.models import load_model

    revision = store.save("judge", adapters[1], step=7, metrics={"loss": 0.5})
    assert sorted(p.name for p in revision.path.iterdir()) == [
        "adapter_config.json",
        "adapter_model.safetensors",
        "revision.json",
    ]
    meta = json.loads((revision.path / "revision.json").read_text())
    assert meta["step"] == 7 and meta["metrics"] == {"loss": 0.5} and meta["parent"] is None
    assert meta["base_fingerprint"] == base_fingerprint(adapters[1])
    assert meta["bytes"] == (revision.path / "adapter_model.safetensors").stat().st_size
    restored = PeftModel.from_pretrained(load_model(str(tiny_vlm_dir), device="cpu").model, revision.path).eval()
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        assert torch.equal(restored(input_ids=ids).logits, adapters[1](input_ids=ids).logits)


def test_revisions_are_content_addressed_and_chained(store, adapters):
    first = store.save("judge", adapters[1], step=1)
    again = store.save("judge", adapters[1], step=99)  # same weights: the same revision, metadata kept
    second = store.save("judge", adapters[2], step=2, parent=first.id)
    assert again.id == first.id and again.step == 1
    assert second.id != first.id and second.parent == first.ref
    assert [r.id for r in store.revisions("judge")] == [first.id, second.id]
    assert store.resolve("judge").id == second.id  # a bare policy is its latest revision
    assert store.history("judge", "latest") == [first.id, second.id]


def test_resolve_accepts_aliases_and_unique_prefixes_and_explains_failures(store, adapters):
    first = store.save("judge", adapters[1])
    store.promote(f"judge@{first.id}", "prod")
    assert store.resolve("judge@prod") == first
    assert store.resolve(f"judge@{first.id[:5]}") == first
    with pytest.raises(AdapterStoreError, match="unknown policy 'nope'.*judge"):
        store.resolve("nope@prod")
    with pytest.raises(AdapterStoreError, match="no alias or revision 'staging'.*aliases: latest, prod"):
        store.resolve("judge@staging")
    with pytest.raises(AdapterStoreError, match="at least 4"):
        store.resolve(f"judge@{first.id[:3]}")
    with pytest.raises(AdapterStoreError, match="policy name '../x' is not allowed"):
        store.resolve("../x@prod")


def test_promote_and_rollback_walk_the_alias_history(store, adapters):
    first, second = store.save("judge", adapters[1]), store.save("judge", adapters[2])
    with pytest.raises(AdapterStoreError, match="no earlier revision"):
        store.rollback("judge")
    store.promote(first.ref)
    store.promote(second.ref)
    assert store.aliases("judge")["prod"] == second.id
    assert store.rollback("judge") == first
    assert store.aliases("judge")["prod"] == first.id
    with pytest.raises(AdapterStoreError, match="no earlier revision"):
        store.rollback("judge")
    with pytest.raises(AdapterStoreError, match="moves by itself"):
        store.promote(first.ref, "latest")


def test_gc_keeps_what_aliases_rollback_and_recent_saves_need(store, tiny_vlm_dir):
    revisions = [store.save("judge", lora_model(tiny_vlm_dir, seed)) for seed in range(10, 16)]
    store.promote(revisions[0].ref)
    store.promote(revisions[1].ref)  # prod = 1, history [0, 1]
    would = store.gc(keep_last=2, keep_history=2, dry_run=True)
    assert {r.id for r in would} == {r.id for r in revisions[2:4]}
    assert len(store.revisions("judge")) == 6  # a dry run deletes nothing
    removed = store.gc(keep_last=2, keep_history=2)
    assert {r.id for r in removed} == {r.id for r in revisions[2:4]}
    assert [r.id for r in store.revisions("judge")] == [r.id for r in revisions[:2] + revisions[4:]]
    assert store.rollback("judge") == revisions[0]


def test_half_written_revisions_are_invisible_and_twin_saves_agree(store, adapters):
    first = store.save("judge", adapters[1])
    (first.path.parent / f".{first.id}.crashed").mkdir()  # a save that died before its rename
    assert [r.id for r in store.revisions("judge")] == [first.id]
    results, errors = [], []

    def save():
        try:
            results.append(store.save("twins", adapters[2]).id)
        except Exception as exc:  # pragma: no cover - the assertion below reports it
            errors.append(exc)

    threads = [threading.Thread(target=save) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(set(results)) == 1 and len(store.revisions("twins")) == 1


def test_check_base_names_both_fingerprints_and_the_fix(store, adapters):
    revision = store.save("judge", adapters[1])
    check_base(revision, revision.base_fingerprint)
    with pytest.raises(BaseMismatchError, match="trained over base sha256:.*serving base is sha256:0.*retrain"):
        check_base(revision, "sha256:0")


# -- adapters in the transformers backend and the pool ---------------------------------------------------------


def test_backend_answers_through_each_adapter_exactly_as_the_trained_model(store, adapters, tiny_vlm_dir):
    from judge.backends.hf import TransformersBackend
    from judge.models import LoadedModel, load_model

    backend = served_copy(tiny_vlm_dir)
    base_texts = _texts(backend)
    processor = load_model(str(tiny_vlm_dir), device="cpu").processor
    trained = {s: TransformersBackend(LoadedModel(adapters[s], processor, True)) for s in (1, 2)}
    expected = {s: _texts(trained[s], "default") for s in (1, 2)}
    assert expected[1] != expected[2] != base_texts
    for seed in (1, 2):
        revision = store.save("judge", adapters[seed])
        backend.load_adapter(revision.ref, str(revision.path))
        assert _texts(backend, revision.ref) == expected[seed]
    # Rows under the base and two adapters share one generation (PEFT's mixed batch), each with its own answer.
    refs = {seed: store.save("judge", adapters[seed]).ref for seed in (1, 2)}
    calls = _count_generate_calls(backend)
    mixed = backend.generate(_requests(None, 1) + _requests(refs[1], 1) + _requests(refs[2], 1), GREEDY)
    assert [g.text for g in mixed] == [base_texts[0], expected[1][0], expected[2][0]]
    assert calls == [3]
    assert _texts(backend) == base_texts  # the base is untouched underneath
    with pytest.raises(ValueError, match="already loaded"):
        backend.load_adapter(revision.ref, str(revision.path))
    for name in list(backend.adapters):
        backend.unload_adapter(name)
    assert backend.adapters == [] and _texts(backend) == base_texts
    with pytest.raises(ValueError, match="not loaded"):
        _texts(backend, revision.ref)
    # Freed slots take the next revisions in place (a tensor copy where rank and scaling match); a different
    # rank gets a fresh slot.
    wide = lora_model(tiny_vlm_dir, 3, r=8)
    for name, model in (("again", adapters[1]), ("wide", wide), ("last", adapters[2])):
        revision = store.save(name, model)
        backend.load_adapter(name, str(revision.path))
        want = _texts(TransformersBackend(LoadedModel(model, processor, True)), "default")
        assert _texts(backend, name) == want
    assert _texts(backend, "again") == expected[1] and _texts(backend) == base_texts
    # The same rank with another scaling goes through PEFT's hotswap into the freed slot, and back again.
    slots = set(backend.loaded.model.peft_config)
    louder = lora_model(tiny_vlm_dir, 5, alpha=24)
    backend.unload_adapter("again")
    backend.load_adapter("louder", str(store.save("louder", louder).path))
    assert _texts(backend, "louder") == _texts(TransformersBackend(LoadedModel(louder, processor, True)), "default")
    backend.unload_adapter("louder")
    backend.load_adapter("again", str(store.resolve("again").path))
    assert _texts(backend, "again") == expected[1] and _texts(backend, "last") == expected[2]
    assert set(backend.loaded.model.peft_config) == slots


def _count_generate_calls(backend) -> list[int]:
    """The rows of each `model.generate` the backend makes from now on (its model's generate, wrapped)."""
    rows: list[int] = []
    model = backend.loaded.model
    generate = model.generate

    def counted(*args, **kwargs):
        rows.append(len(kwargs["input_ids"]))
        return generate(*args, **kwargs)

    model.generate = counted
    return rows


def test_an_adapter_in_the_vision_tower_keeps_its_rows_apart(tiny_vlm_dir, store):
    """Mixed-batch LoRA indexes a layer's input by row; a vision layer's input is image patches, so an adapter
    with layers there runs as a batch of its own (and answers as it does alone)."""
    from peft import LoraConfig, get_peft_model

    from judge.models import load_model

    backend = served_copy(tiny_vlm_dir)
    torch.manual_seed(4)
    config = LoraConfig(r=2, lora_alpha=32, target_modules=r".*\.(qkv|q_proj)$", init_lora_weights=False)
    seeing = get_peft_model(load_model(str(tiny_vlm_dir), device="cpu").model, config).eval()
    assert any("visual" in name for name, _ in seeing.named_modules() if name.endswith(".qkv"))
    backend.load_adapter("seeing", str(store.save("seeing", seeing).path))
    backend.load_adapter("plain", str(store.save("plain", lora_model(tiny_vlm_dir, 1)).path))
    assert backend.mixes({None, "plain"}) and not backend.mixes({"plain", "seeing"})
    alone = {name: _texts(backend, name)[0] for name in ("seeing", "plain")}
    calls = _count_generate_calls(backend)
    texts = [g.text for g in backend.generate(_requests("seeing", 1) + _requests("plain", 1), GREEDY)]
    assert texts == [alone["seeing"], alone["plain"]] and calls == [1, 1]


class RecordingBackend:
    """Counts load / unload calls (the pool's bookkeeping, without a model)."""

    def __init__(self):
        self.loaded: list[str] = []
        self.calls: list[str] = []

    def load_adapter(self, name, path):
        self.loaded.append(name)
        self.calls.append(f"load {name}")

    def unload_adapter(self, name):
        self.loaded.remove(name)
        self.calls.append(f"unload {name}")


def test_pool_evicts_the_least_recently_used_unpinned_adapter(store, tiny_vlm_dir):
    revisions = [store.save("judge", lora_model(tiny_vlm_dir, seed)) for seed in (21, 22, 23)]
    backend = RecordingBackend()
    pool = AdapterPool(backend, store, base_fingerprint=revisions[0].base_fingerprint, capacity=2)
    a, b, c = revisions
    pool.ensure_loaded(a)
    pool.ensure_loaded(b)
    pool.ensure_loaded(a)  # a is now the most recently used
    pool.ensure_loaded(c)
    assert backend.loaded == [a.ref, c.ref] and backend.calls[-2:] == [f"unload {b.ref}", f"load {c.ref}"]
    with pool.pinned(a), pool.pinned(c):
        pool.ensure_loaded(b)  # everything resident is in use: go over capacity rather than fail
        assert sorted(backend.loaded) == sorted([a.ref, b.ref, c.ref])
    pool.ensure_loaded(b)  # released: back to capacity, least recently used first
    assert backend.loaded == [c.ref, b.ref]
    pool.ensure_loaded(a)
    assert backend.loaded == [b.ref, a.ref] and pool.loads == 5 and pool.evictions == 3
    with pytest.raises(BaseMismatchError):
        AdapterPool(backend, store, base_fingerprint="sha256:other").resolve("judge@latest")


def test_reserved_slots_take_the_first_loads_by_copy_and_answer_as_the_trained_models(store, tiny_vlm_dir):
    """`--reserve-adapter-slots`: the pool's capacity in slots is built at start, so no cold load builds one."""
    from judge.backends.hf import TransformersBackend
    from judge.models import LoadedModel, load_model

    backend = served_copy(tiny_vlm_dir)
    fingerprint = base_fingerprint(backend.loaded.model)
    assert AdapterPool(backend, AdapterStore(store.root.parent / "empty"), base_fingerprint=fingerprint).reserve() == 0
    models = {seed: lora_model(tiny_vlm_dir, seed) for seed in (31, 32, 33)}
    revisions = {seed: store.save(f"p{seed}", model) for seed, model in models.items()}
    pool = AdapterPool(backend, store, base_fingerprint=fingerprint, capacity=3)
    assert pool.reserve() == 3 and backend.adapters == [] and pool.resident() == []
    slots = set(backend.loaded.model.peft_config)
    assert len(slots) == 3 and _texts(backend) == _texts(served_copy(tiny_vlm_dir))  # free slots change nothing
    processor = load_model(str(tiny_vlm_dir), device="cpu").processor
    for seed, revision in revisions.items():
        name = pool.ensure_loaded(revision)
        assert _texts(backend, name) == _texts(
            TransformersBackend(LoadedModel(models[seed], processor, True)), "default"
        )
    assert set(backend.loaded.model.peft_config) == slots  # every load went into a reserved slot
    assert pool.reserve() == 0  # already there


# -- the command line -----------------------------------------------------------------------------------------


def test_cli_lists_shows_promotes_rolls_back_and_collects(store, tiny_vlm_dir, capsys):
    first, second = (store.save("judge", lora_model(tiny_vlm_dir, s), step=s) for s in (31, 32))
    root = str(store.root)
    assert cli(["adapters", "--store", root, "promote", f"judge@{first.id[:6]}"]) == 0
    assert cli(["adapters", "--store", root, "promote", "judge@latest"]) == 0
    assert cli(["adapters", "--store", root, "list"]) == 0
    listing = capsys.readouterr().out
    assert f"judge@prod -> {second.id}" in listing and f"{first.id}  step 31" in listing
    assert f"{second.id}  step 32" in listing and "[latest,prod]" in listing
    assert cli(["adapters", "--store", root, "rollback", "judge"]) == 0
    assert f"judge@prod -> {first.id}" in capsys.readouterr().out
    assert cli(["adapters", "--store", root, "show", "judge@prod"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["revision"] == first.id and shown["step"] == 31
    assert cli(["adapters", "--store", root, "gc", "--keep-last", "0", "--keep-history", "1"]) == 0
    assert "removed 0 revisions" in capsys.readouterr().out  # prod and latest still point at both
    assert cli(["adapters", "--store", root, "show", "judge@nope"]) == 2
    assert "no alias or revision 'nope'" in capsys.readouterr().err


def test_cli_imports_a_peft_folder_over_a_fingerprinted_base(store, adapters, tiny_vlm_dir, tmp_path, capsys):
    adapters[1].save_pretrained(tmp_path / "peft")
    assert cli(["adapters", "fingerprint", str(tiny_vlm_dir)]) == 0
    fingerprint = capsys.readouterr().out.strip()
    assert fingerprint == base_fingerprint(adapters[1])
    args = ["adapters", "--store", str(store.root), "import", "judge", str(tmp_path / "peft")]
    assert cli([*args, "--base-fingerprint", fingerprint, "--step", "3"]) == 0
    imported = store.resolve("judge")
    assert imported.step == 3 and imported.base_fingerprint == fingerprint
    assert imported.id == store.save("judge", adapters[1]).id  # the same content, whichever way it came in

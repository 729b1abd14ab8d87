"""The store's SQLite catalogue: migration from `refs.json`, several writer processes, saves killed midway.

Revisions here are cheap byte payloads (`add_files`); what is tested is the index and the folders, not
PEFT (tests/adapter_revisions/test_adapters.py covers real adapters through the same code).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from adapter_revisions import AdapterStore, AdapterStoreError
from adapter_revisions import catalogue as catalogue_module
from adapter_revisions.catalogue import CATALOGUE
from adapter_revisions.store import ORPHAN_AGE_S, _content_id

CONFIG = {"peft_type": "LORA", "r": 1, "target_modules": ["q_proj"]}
FINGERPRINT = "sha256:test"
ROOT = Path(__file__).resolve().parents[2]


def add(store: AdapterStore, policy: str, n: int, **meta):
    return store.add_files(policy, f"weights {n}".encode(), CONFIG, base_fingerprint=FINGERPRINT, **meta)


def write_legacy_store(root: Path) -> dict[str, list[str]]:
    """A store as the `refs.json` version wrote it: folders, `revision.json`, aliases with history."""
    ids: dict[str, list[str]] = {}
    for policy, count in (("judge", 4), ("policy-b", 2)):
        for n in range(count):
            weights = f"{policy} {n}".encode()
            rid = _content_id(weights, CONFIG)
            folder = root / policy / "revisions" / rid
            folder.mkdir(parents=True)
            (folder / "adapter_model.safetensors").write_bytes(weights)
            (folder / "adapter_config.json").write_text(json.dumps(CONFIG))
            meta = {
                "policy": policy,
                "revision": rid,
                "base_fingerprint": FINGERPRINT,
                "step": n,
                "created": 1000.0 + n,
            }
            (folder / "revision.json").write_text(json.dumps(meta))
            ids.setdefault(policy, []).append(rid)
    (root / "judge" / "revisions" / ".deadbeef.tmp").mkdir()  # a save that died before its rename
    judge = ids["judge"]
    refs = {
        "aliases": {"latest": judge[3], "prod": judge[2]},
        "history": {"latest": judge, "prod": [judge[0], judge[2]]},
    }
    (root / "judge" / "refs.json").write_text(json.dumps(refs))
    return ids


def test_a_refs_json_store_is_migrated_on_first_open(tmp_path):
    ids = write_legacy_store(tmp_path)
    store = AdapterStore(tmp_path)
    assert store.policies() == ["judge", "policy-b"]
    assert [r.id for r in store.revisions("judge")] == ids["judge"]  # oldest first, by their creation time
    assert store.resolve("judge@prod").id == ids["judge"][2] and store.resolve("judge").id == ids["judge"][3]
    assert store.resolve("policy-b").id == ids["policy-b"][1]  # no refs.json: its latest is the newest revision
    assert store.history("judge", "latest") == ids["judge"] and store.resolve("judge@prod").step == 2
    assert (tmp_path / CATALOGUE).is_file() and not (tmp_path / "judge" / "refs.json").exists()
    assert (tmp_path / "judge" / "refs.json.migrated").is_file()
    assert store.rollback("judge").id == ids["judge"][0]  # the history came along
    again = AdapterStore(tmp_path)  # a second open finds the index and migrates nothing
    assert again.resolve("judge@prod").id == ids["judge"][0]
    with pytest.raises(AdapterStoreError, match="no alias or revision"):
        again.resolve(f"judge@{ids['policy-b'][0]}")  # ids are looked up within their own policy


def test_policy_b_gets_latest_after_migration(tmp_path):
    ids = write_legacy_store(tmp_path)
    store = AdapterStore(tmp_path)
    with pytest.raises(AdapterStoreError, match="no alias or revision"):
        store.resolve("policy-b@prod")
    new = add(store, "policy-b", 99)
    assert store.resolve("policy-b").id == new.id
    assert store.history("policy-b", "latest") == [ids["policy-b"][-1], new.id]
    assert len(store.revisions("policy-b")) == len(ids["policy-b"]) + 1


def test_a_migration_killed_before_its_rename_leaves_the_old_store_and_reruns(tmp_path, monkeypatch):
    ids = write_legacy_store(tmp_path)
    real_rename = os.rename

    def crash(src, dst):
        if str(dst).endswith(CATALOGUE):
            raise KeyboardInterrupt("killed mid-migration")
        return real_rename(src, dst)

    monkeypatch.setattr(catalogue_module.os, "rename", crash)
    with pytest.raises(KeyboardInterrupt):
        AdapterStore(tmp_path).resolve("judge@prod")
    assert not (tmp_path / CATALOGUE).exists() and (tmp_path / "judge" / "refs.json").is_file()
    assert list(tmp_path.glob(f".{CATALOGUE}.*")), "the half-built index stays behind, as after a kill"
    monkeypatch.setattr(catalogue_module.os, "rename", real_rename)
    store = AdapterStore(tmp_path)
    assert store.resolve("judge@prod").id == ids["judge"][2]
    assert store.history("judge", "prod") == [ids["judge"][0], ids["judge"][2]]
    assert not list(tmp_path.glob(f".{CATALOGUE}.*"))


def test_reads_of_an_empty_store_create_nothing(tmp_path):
    store = AdapterStore(tmp_path / "nowhere")
    assert store.policies() == [] and store.revisions("judge") == []
    with pytest.raises(AdapterStoreError, match="unknown policy 'judge'.*none yet"):
        store.resolve("judge@prod")
    assert not (tmp_path / "nowhere").exists()


def test_resolve_by_prefix_and_ambiguity_use_the_index(tmp_path):
    store = AdapterStore(tmp_path)
    revisions = [add(store, "judge", n) for n in range(300)]
    by_prefix: dict[str, list[str]] = {}
    for r in revisions:
        by_prefix.setdefault(r.id[:4], []).append(r.id)
    unique = next(p for p, rids in by_prefix.items() if len(rids) == 1)
    assert store.resolve(f"judge@{unique}").id == by_prefix[unique][0]
    assert store.resolve(f"judge@{revisions[7].id.upper()}").id == revisions[7].id
    shared = revisions[0].id[:4]
    clash = next(n for n in range(300, 200_000) if _content_id(f"weights {n}".encode(), CONFIG)[:4] == shared)
    add(store, "judge", clash)
    with pytest.raises(AdapterStoreError, match="matches several revisions"):
        store.resolve(f"judge@{shared}")
    assert store.history("judge", "latest")[-1] == _content_id(f"weights {clash}".encode(), CONFIG)
    assert len(store.history("judge", "latest")) == 100  # HISTORY_LENGTH: the oldest moves are forgotten


WRITER = """
import sys
from adapter_revisions import AdapterStore
store = AdapterStore(sys.argv[1])
w = int(sys.argv[2])
for n in range(int(sys.argv[3])):
    rev = store.add_files("shared", f"writer {w} rev {n}".encode(), {"peft_type": "LORA", "r": 1},
                          base_fingerprint="sha256:test", step=n)
    store.add_files(f"own-{w}", f"own {n}".encode(), {"peft_type": "LORA", "r": 1}, base_fingerprint="sha256:test")
    store.promote(rev.ref, f"prod-{w}")
    store.resolve("shared@latest")
"""


def test_the_index_exists_before_a_first_save_writes_its_folder(tmp_path, monkeypatch):
    """A first index built while another process's save is in flight imports the folders it finds as an
    older store's revisions and moves `latest` for them: so every save makes the index first (this race
    once gave `shared@latest` 61 moves for 60 saves in the four-writer test below)."""
    store = AdapterStore(tmp_path)
    seen = []
    write_folder = AdapterStore._write_folder

    def checked(self, *args, **kwargs):
        seen.append((tmp_path / CATALOGUE).is_file())
        return write_folder(self, *args, **kwargs)

    monkeypatch.setattr(AdapterStore, "_write_folder", checked)
    add(store, "judge", 0)
    assert seen == [True]
    assert store.history("judge", "latest") == [_content_id(b"weights 0", CONFIG)]


def test_four_writer_processes_lose_nothing(tmp_path):
    per_writer = 15
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(tmp_path), str(w), str(per_writer)], env=env, stderr=subprocess.PIPE
        )
        for w in range(4)
    ]
    for writer in writers:
        _, err = writer.communicate(timeout=120)
        assert writer.returncode == 0, err.decode()
    store = AdapterStore(tmp_path)
    shared = store.revisions("shared")
    assert len(shared) == 4 * per_writer and store.policies() == ["own-0", "own-1", "own-2", "own-3", "shared"]
    assert len(store.history("shared", "latest")) == 4 * per_writer  # every save moved latest once
    for w in range(4):
        assert len(store.revisions(f"own-{w}")) == per_writer
        assert store.resolve(f"shared@prod-{w}").step == per_writer - 1
        assert len(store.history("shared", f"prod-{w}")) == per_writer
    for revision in shared:  # every indexed revision is whole: its bytes hash to its id
        weights = (revision.path / "adapter_model.safetensors").read_bytes()
        config = json.loads((revision.path / "adapter_config.json").read_text())
        assert _content_id(weights, config) == revision.id


SLOW_SAVER = """
import sys
from adapter_revisions import AdapterStore
store = AdapterStore(sys.argv[1])
for n in range(1000):
    store.add_files("judge", bytes([n % 256]) * (40 << 20), {"peft_type": "LORA", "r": 1}, base_fingerprint="sha256:test")
"""

KILLED_AFTER_RENAME = """
import os, signal, sys
from adapter_revisions import AdapterStore
from adapter_revisions.catalogue import Catalogue
store = AdapterStore(sys.argv[1])
Catalogue.write = lambda self: os.kill(os.getpid(), signal.SIGKILL)  # dies after the rename, before indexing
store.add_files("judge", b"orphan weights", {"peft_type": "LORA", "r": 1}, base_fingerprint="sha256:test", step=5)
"""


def test_a_save_killed_midway_leaves_no_half_revision_visible(tmp_path):
    store = AdapterStore(tmp_path)
    first = add(store, "judge", 1)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # Killed while writing its weights: the temporary folder is invisible and the index unchanged.
    saver = subprocess.Popen([sys.executable, "-c", SLOW_SAVER, str(tmp_path)], env=env)
    folder = tmp_path / "judge" / "revisions"
    deadline = time.monotonic() + 60
    while not any(p.name.startswith(".") for p in folder.iterdir()):
        assert time.monotonic() < deadline and saver.poll() is None, "the saver never started writing"
        time.sleep(0.005)
    saver.send_signal(signal.SIGKILL)
    saver.wait()
    opened = AdapterStore(tmp_path)
    for revision in opened.revisions("judge"):
        weights = (revision.path / "adapter_model.safetensors").read_bytes()
        assert _content_id(weights, json.loads((revision.path / "adapter_config.json").read_text())) == revision.id
    assert opened.resolve("judge@latest").id == opened.revisions("judge")[-1].id
    # Killed after its folder was renamed into place but before its index row: invisible too.
    killed = subprocess.run([sys.executable, "-c", KILLED_AFTER_RENAME, str(tmp_path)], env=env)
    assert killed.returncode == -signal.SIGKILL
    orphan_id = _content_id(b"orphan weights", {"peft_type": "LORA", "r": 1})
    assert (folder / orphan_id / "revision.json").is_file()
    with pytest.raises(AdapterStoreError):
        opened.revision("judge", orphan_id)
    assert orphan_id not in {r.id for r in opened.revisions("judge")}
    # gc sweeps such leftovers once no save can still be writing them; a live save's folder is left alone.
    old = time.time() - ORPHAN_AGE_S - 60
    for path in folder.iterdir():
        if path.name.startswith("."):
            os.utime(path, (old, old))
    opened.gc(keep_last=100)
    assert not any(p.name.startswith(".") for p in folder.iterdir()) and (folder / orphan_id).is_dir()
    # Saving the same content again indexes the folder that was already there, with its own metadata.
    again = opened.add_files("judge", b"orphan weights", {"peft_type": "LORA", "r": 1}, base_fingerprint=FINGERPRINT)
    assert again.id == orphan_id and again.step == 5 and opened.resolve("judge").id == orphan_id
    assert first.id in {r.id for r in opened.revisions("judge")}


def test_gc_sweeps_old_unindexed_folders(tmp_path):
    store = AdapterStore(tmp_path)
    kept = add(store, "judge", 1)
    folder = tmp_path / "judge" / "revisions"
    stray = folder / hashlib.sha256(b"x").hexdigest()[:16]
    stray.mkdir()
    (stray / "revision.json").write_text("{}")
    assert store.gc() == [] and stray.is_dir()  # young: a save may still be about to index it
    old = time.time() - ORPHAN_AGE_S - 60
    os.utime(stray, (old, old))
    assert store.gc() == [] and not stray.exists() and kept.path.is_dir()


def test_add_many_registers_a_chunk_in_one_transaction(tmp_path):
    store = AdapterStore(tmp_path)
    first = add(store, "judge", 0)
    chunk = [(f"weights {n}".encode(), CONFIG) for n in range(40)]  # the first is `first` again
    added = store.add_many("judge", chunk, base_fingerprint=FINGERPRINT)
    assert [r.id for r in added] == list(dict.fromkeys(_content_id(w, c) for w, c in chunk))
    assert added[0] == first and added[0].created == first.created  # an existing revision keeps its metadata
    assert store.resolve("judge").id == added[-1].id and len(store.revisions("judge")) == 40
    for revision in added:
        assert (revision.path / "adapter_model.safetensors").read_bytes() == f"weights {added.index(revision)}".encode()
    assert not any(p.name.startswith(".") for p in (tmp_path / "judge" / "revisions").iterdir())
    with pytest.raises(AdapterStoreError, match="base_fingerprint is empty"):
        store.add_many("judge", chunk, base_fingerprint="")


def test_the_wal_is_folded_in_by_the_background_checkpoint_not_by_a_save(tmp_path):
    """Saves never checkpoint inline (SQLite's automatic checkpoint made the save crossing 1,000 WAL pages wait
    5-6 ms); every CHECKPOINT_EVERY writes the background thread copies the WAL into the index file."""
    import shutil
    import sqlite3

    store = AdapterStore(tmp_path / "store")
    add(store, "p", 1)
    conn = store.catalogue._connection()
    assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
    for n in range(2, catalogue_module.CHECKPOINT_EVERY * 2 + 1):  # writes 2 .. 2 × CHECKPOINT_EVERY
        add(store, "p", n)
    assert catalogue_module.CHECKPOINTER.wait_idle()
    alone = tmp_path / "alone.sqlite"
    shutil.copyfile(tmp_path / "store" / CATALOGUE, alone)  # the index file without its WAL
    count = sqlite3.connect(alone).execute("SELECT count(*) FROM revisions").fetchone()[0]
    assert count == catalogue_module.CHECKPOINT_EVERY * 2  # every commit up to the last request is in the file


def test_a_bulk_registration_is_checkpointed_by_the_rows_it_changed(tmp_path):
    """One `add_many` transaction of more than CHECKPOINT_ROWS rows asks for a checkpoint by itself (counted by
    transactions alone, a 10⁶ import left a 250 MB WAL behind)."""
    import shutil
    import sqlite3

    store = AdapterStore(tmp_path / "store")
    n = catalogue_module.CHECKPOINT_ROWS + 10
    store.add_many("p", [(f"bulk {i}".encode(), CONFIG) for i in range(n)], base_fingerprint=FINGERPRINT)
    assert catalogue_module.CHECKPOINTER.wait_idle()
    alone = tmp_path / "alone.sqlite"
    shutil.copyfile(tmp_path / "store" / CATALOGUE, alone)
    assert sqlite3.connect(alone).execute("SELECT count(*) FROM revisions").fetchone()[0] == n

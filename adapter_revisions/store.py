"""The adapter store: named policies, content-addressed LoRA revisions, aliases that move.

Many judges and policies share one expensive base model, so what moves between training and serving is
the adapter alone. The store is a folder any process can read (a shared filesystem between trainers and
servers):

    ROOT/<policy>/revisions/<id>/adapter_model.safetensors   PEFT's own files, loadable by PeftModel
    ROOT/<policy>/revisions/<id>/adapter_config.json
    ROOT/<policy>/revisions/<id>/revision.json               base fingerprint, step, metrics, parent, time
    ROOT/catalogue.sqlite                                    the index: revisions, aliases and their history

A revision's id is the hash of its weights and adapter config, so saving the same adapter twice gives one
revision. Revisions are written to a temporary folder, fsynced and renamed into place, and only then
indexed (`adapter_revisions.catalogue`, SQLite in WAL mode): readers see a revision whole or not at all, a
lookup costs one index probe at any catalogue size, and a server resolving `judge@prod` while a trainer
promotes sees the old or the new revision, never a mix. Stores an older version wrote (`refs.json`) are
migrated on first open.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adapter_revisions.catalogue import Catalogue, fsync_path

__all__ = [
    "ADAPTER_CONFIG",
    "ADAPTER_WEIGHTS",
    "LATEST",
    "AdapterStore",
    "AdapterStoreError",
    "BaseMismatchError",
    "Revision",
    "check_base",
    "split_ref",
]

ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
REVISION_META = "revision.json"
LATEST = "latest"
"""The alias every save moves to the new revision."""
ID_LENGTH = 16
"""Hex digits of the content hash that name a revision (64 bits)."""

HISTORY_LENGTH = 100
"""Moves of one alias remembered for rollback."""
ORPHAN_AGE_S = 3600.0
"""A revision folder nothing indexes (a save killed between its rename and its index row) older than this
is swept by `gc`; younger ones may belong to a save still in progress."""

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# Fields PEFT writes that say where or with what an adapter was saved, not what it is.
_VOLATILE_CONFIG = {"base_model_name_or_path", "revision", "peft_version", "inference_mode", "auto_mapping"}


class AdapterStoreError(ValueError):
    """A bad name, an unknown policy / revision / alias, or a refused store operation."""


class BaseMismatchError(AdapterStoreError):
    """An adapter trained over one base model asked to run over another."""


@dataclass(frozen=True)
class Revision:
    """One saved adapter: where its files are and what `revision.json` says about it."""

    policy: str
    id: str
    path: Path
    meta: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def ref(self) -> str:
        """`policy@id`: the name a server loads it under (unique, so caches never go stale)."""
        return f"{self.policy}@{self.id}"

    @property
    def base_fingerprint(self) -> str:
        return self.meta.get("base_fingerprint", "")

    @property
    def step(self) -> int | None:
        return self.meta.get("step")

    @property
    def parent(self) -> str | None:
        return self.meta.get("parent")

    @property
    def created(self) -> float:
        return float(self.meta.get("created", 0.0))


def split_ref(ref: str) -> tuple[str, str]:
    """`"judge@prod"` → `("judge", "prod")`; a bare policy means its `latest` revision."""
    policy, _, name = ref.partition("@")
    return policy, name or LATEST


def check_base(revision: Revision, fingerprint: str) -> None:
    """Refuse to run `revision` over a base whose fingerprint is `fingerprint`."""
    if revision.base_fingerprint != fingerprint:
        raise BaseMismatchError(
            f"adapter {revision.ref} was trained over base {revision.base_fingerprint or '(unknown)'}, but the "
            f"serving base is {fingerprint}: serve it over the base model it was trained on, or retrain it "
            "over this one"
        )


def _check_name(kind: str, name: str) -> str:
    if not _NAME.match(name):
        raise AdapterStoreError(
            f"{kind} name {name!r} is not allowed: use 1-64 letters, digits, '.', '_' or '-', starting with a "
            "letter or digit"
        )
    return name


def _jsonable(config: dict[str, Any]) -> dict[str, Any]:
    """PEFT's config as JSON values: sets (`target_modules`) become sorted lists, enums their values."""

    def plain(value: Any) -> Any:
        if isinstance(value, (set, frozenset)):
            return sorted(value, key=str)
        return value.value if hasattr(value, "value") else str(value)  # only called for non-JSON values

    return json.loads(json.dumps(config, default=plain))


def _content_id(weights: bytes, config: dict[str, Any]) -> str:
    stable = {k: v for k, v in config.items() if k not in _VOLATILE_CONFIG}
    digest = hashlib.sha256(weights)
    digest.update(json.dumps(stable, sort_keys=True, default=str).encode())
    return digest.hexdigest()[:ID_LENGTH]


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


class AdapterStore:
    """A folder of policies, each a set of adapter revisions plus aliases (see the module docstring).

    >>> import tempfile
    >>> store = AdapterStore(tempfile.mkdtemp())
    >>> rev = store.add_files("judge", b"weights", {"peft_type": "LORA", "r": 8}, base_fingerprint="sha256:0")
    >>> store.resolve("judge").id == store.resolve(f"judge@{rev.id[:6]}").id == rev.id
    True
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.catalogue = Catalogue(self.root, HISTORY_LENGTH)

    # -- writing ---------------------------------------------------------------------------------------------

    def save(
        self,
        policy: str,
        model: Any,
        *,
        adapter_name: str = "default",
        base_fingerprint: str | None = None,
        step: int | None = None,
        metrics: dict[str, float] | None = None,
        parent: str | None = None,
        base_model: str | None = None,
    ) -> Revision:
        """Export `model`'s PEFT adapter `adapter_name` as a new revision of `policy` (and move `latest`).

        Only the adapter's tensors are written: the base model never leaves the process.
        """
        from peft import get_peft_model_state_dict
        from safetensors.torch import save

        from adapter_revisions.fingerprint import base_fingerprint as fingerprint_of

        config = model.peft_config[adapter_name].to_dict()
        tensors = {
            k: v.detach().to("cpu").contiguous()
            for k, v in get_peft_model_state_dict(model, adapter_name=adapter_name).items()
        }
        weights = save(tensors, metadata={"format": "pt"})
        return self.add_files(
            policy,
            weights,
            config,
            base_fingerprint=base_fingerprint or fingerprint_of(model),
            step=step,
            metrics=metrics,
            parent=parent,
            base_model=base_model or config.get("base_model_name_or_path"),
        )

    def add_folder(self, policy: str, folder: str | Path, *, base_fingerprint: str, **meta: Any) -> Revision:
        """Import an adapter folder PEFT wrote (`save_pretrained`) as a revision of `policy`."""
        folder = Path(folder)
        for name in (ADAPTER_WEIGHTS, ADAPTER_CONFIG):
            if not (folder / name).is_file():
                raise AdapterStoreError(f"{folder} has no {name}: point at a folder PEFT's save_pretrained wrote")
        config = json.loads((folder / ADAPTER_CONFIG).read_text())
        return self.add_files(
            policy, (folder / ADAPTER_WEIGHTS).read_bytes(), config, base_fingerprint=base_fingerprint, **meta
        )

    def add_files(
        self,
        policy: str,
        weights: bytes,
        config: dict[str, Any],
        *,
        base_fingerprint: str,
        step: int | None = None,
        metrics: dict[str, float] | None = None,
        parent: str | None = None,
        base_model: str | None = None,
    ) -> Revision:
        """Write a revision from the bytes of `adapter_model.safetensors` and the adapter config."""
        _check_name("policy", policy)
        config = _jsonable(config)
        if not base_fingerprint:
            raise AdapterStoreError("base_fingerprint is empty: compute it with judge.adapters.base_fingerprint")
        if parent is not None:
            parent = self.resolve(parent if "@" in parent else f"{policy}@{parent}").ref
        revision_id = _content_id(weights, config)
        self.catalogue.ensure()  # before the folder is written (see `Catalogue.ensure`)
        existing = self.catalogue.row(policy, revision_id)
        if existing is None:
            meta = {
                "policy": policy,
                "revision": revision_id,
                "base_fingerprint": base_fingerprint,
                "base_model": base_model,
                "step": step,
                "metrics": metrics or {},
                "parent": parent,
                "created": time.time(),
                "bytes": len(weights),
                "peft_type": config.get("peft_type"),
                "r": config.get("r"),
            }
            meta = self._write_folder(policy, revision_id, weights, config, meta)
        with self.catalogue.write() as conn:
            # Indexed only now that the folder is whole and on disk: a save killed earlier leaves nothing visible.
            if existing is None:
                self.catalogue.insert(conn, policy, revision_id, meta)
            self.catalogue.move_alias(conn, policy, LATEST, revision_id)
        return self.revision(policy, revision_id)

    def add_many(
        self,
        policy: str,
        adapters: Sequence[tuple[bytes, dict[str, Any]]],
        *,
        base_fingerprint: str,
        base_model: str | None = None,
        workers: int = 16,
    ) -> list[Revision]:
        """Register many revisions of `policy` at once (`(weights, config)` pairs; `latest` moves to the
        last): a catalogue import, or a benchmark's.

        One save pays three fsyncs one after another; here the folders are written unsynced, fsynced
        together by `workers` threads (the filesystem commits them as a group), renamed into place and
        indexed in one transaction, so a killed import leaves nothing half visible, as a save does.
        """
        _check_name("policy", policy)
        if not base_fingerprint:
            raise AdapterStoreError("base_fingerprint is empty: compute it with judge.adapters.base_fingerprint")
        revisions = self.root / policy / "revisions"
        revisions.mkdir(parents=True, exist_ok=True)
        pending: dict[str, tuple[Path, dict[str, Any]]] = {}
        files: list[Path] = []
        order: list[str] = []
        for weights, config in adapters:
            config = _jsonable(config)
            revision_id = _content_id(weights, config)
            order.append(revision_id)
            if revision_id in pending or (revisions / revision_id).exists():
                continue
            meta = {
                "policy": policy,
                "revision": revision_id,
                "base_fingerprint": base_fingerprint,
                "base_model": base_model,
                "step": None,
                "metrics": {},
                "parent": None,
                "created": time.time(),
                "bytes": len(weights),
                "peft_type": config.get("peft_type"),
                "r": config.get("r"),
            }
            staging = Path(tempfile.mkdtemp(dir=revisions, prefix=f".{revision_id}."))
            for name, payload in (
                (ADAPTER_WEIGHTS, weights),
                (ADAPTER_CONFIG, (json.dumps(config, indent=2, sort_keys=True) + "\n").encode()),
                (REVISION_META, (json.dumps(meta, indent=2, sort_keys=True) + "\n").encode()),
            ):
                (staging / name).write_bytes(payload)
                files.append(staging / name)
            pending[revision_id] = (staging, meta)
        with ThreadPoolExecutor(max(1, workers)) as pool:
            list(pool.map(_fsync_file, files))
        metas: dict[str, dict[str, Any]] = {}
        for revision_id, (staging, meta) in pending.items():
            try:
                os.rename(staging, revisions / revision_id)
                metas[revision_id] = meta
            except OSError:  # a twin got there first: the same content
                shutil.rmtree(staging, ignore_errors=True)
        fsync_path(revisions)
        for revision_id in dict.fromkeys(order):  # folders that were there already keep their own metadata
            if revision_id not in metas:
                metas[revision_id] = json.loads((revisions / revision_id / REVISION_META).read_text())
        with self.catalogue.write() as conn:
            for revision_id, meta in metas.items():
                self.catalogue.insert(conn, policy, revision_id, meta)
            if order:
                self.catalogue.move_alias(conn, policy, LATEST, order[-1])
        return [self._revision(policy, rid, metas[rid]) for rid in dict.fromkeys(order)]

    def _write_folder(
        self, policy: str, revision_id: str, weights: bytes, config: dict[str, Any], meta: dict[str, Any]
    ) -> dict[str, Any]:
        """Write the revision's folder (temporary folder, fsync, rename) and return its `revision.json`.

        A folder already there (a twin save won the rename, or a save killed before indexing it) keeps its
        own metadata: it is the same content.
        """
        revisions = self.root / policy / "revisions"
        final = revisions / revision_id
        if not final.exists():
            revisions.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(dir=revisions, prefix=f".{revision_id}."))
            try:
                for name, payload in (
                    (ADAPTER_WEIGHTS, weights),
                    (ADAPTER_CONFIG, (json.dumps(config, indent=2, sort_keys=True) + "\n").encode()),
                    (REVISION_META, (json.dumps(meta, indent=2, sort_keys=True) + "\n").encode()),
                ):
                    with open(staging / name, "wb") as handle:
                        handle.write(payload)
                        handle.flush()
                        os.fsync(handle.fileno())
                os.rename(staging, final)  # atomic; fails if a twin save got there first, which is fine
                fsync_path(revisions)
            except OSError:
                if not final.exists():
                    raise
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        return json.loads((final / REVISION_META).read_text())

    # -- reading ---------------------------------------------------------------------------------------------

    def policies(self) -> list[str]:
        return self.catalogue.policies()

    def revisions(self, policy: str) -> list[Revision]:
        """Every revision of `policy`, oldest first."""
        _check_name("policy", policy)
        return [self._revision(policy, rid, meta) for rid, meta in self.catalogue.rows(policy)]

    def revision(self, policy: str, revision_id: str) -> Revision:
        meta = self.catalogue.row(_check_name("policy", policy), revision_id)
        if meta is None:
            raise AdapterStoreError(f"{policy} has no revision {revision_id!r}: see `mrjudge adapters list {policy}`")
        return self._revision(policy, revision_id, meta)

    def aliases(self, policy: str) -> dict[str, str]:
        return self.catalogue.aliases(_check_name("policy", policy))

    def history(self, policy: str, alias: str) -> list[str]:
        """Revisions `alias` pointed at, oldest first; the last is the current one."""
        return self.catalogue.history(_check_name("policy", policy), alias)

    def resolve(self, ref: str) -> Revision:
        """`policy@alias`, `policy@<id or unique id prefix>` or `policy` (its latest) → the revision.

        One or two index probes, whatever the size of the catalogue.
        """
        policy, name = split_ref(ref)
        _check_name("policy", policy)
        target = self.catalogue.alias(policy, name)
        if target is not None:
            return self.revision(policy, target)
        matches = self.catalogue.by_prefix(policy, name.lower()) if len(name) >= 4 else []
        if len(matches) == 1:
            return self._revision(policy, *matches[0])
        if not self.catalogue.has_policy(policy):
            known = ", ".join(self.policies()) or "none yet"
            raise AdapterStoreError(f"unknown policy {policy!r} in {ref!r} (policies in {self.root}: {known})")
        if len(matches) > 1:
            raise AdapterStoreError(f"{ref!r} matches several revisions of {policy}: give more of the id")
        aliases = self.aliases(policy)
        raise AdapterStoreError(
            f"{ref!r}: {policy} has no alias or revision {name!r} (aliases: {', '.join(sorted(aliases)) or 'none'}; "
            f"a revision id needs at least 4 of its hex digits)"
        )

    # -- moving aliases --------------------------------------------------------------------------------------

    def promote(self, ref: str, alias: str = "prod") -> Revision:
        """Point `policy@alias` at the revision `ref` names (recorded, so `rollback` can undo it)."""
        revision = self.resolve(ref)
        _check_name("alias", alias)
        if alias == LATEST:
            raise AdapterStoreError(f"'{LATEST}' moves by itself on every save; promote to another alias")
        with self.catalogue.write() as conn:
            self.catalogue.move_alias(conn, revision.policy, alias, revision.id)
        return revision

    def rollback(self, policy: str, alias: str = "prod") -> Revision:
        """Point `policy@alias` back at the revision it pointed at before its last move."""
        _check_name("policy", policy)
        with self.catalogue.write() as conn:
            target = self.catalogue.pop_history(conn, policy, alias)
        if target is None:
            raise AdapterStoreError(f"{policy}@{alias} has no earlier revision to roll back to")
        return self.revision(policy, target)

    def gc(self, *, keep_last: int = 3, keep_history: int = 3, dry_run: bool = False) -> list[Revision]:
        """Delete revisions nothing needs: not the `keep_last` newest of their policy, not an alias's current
        target, not among the last `keep_history` targets of any alias (rollback), not a kept one's parent.

        Each policy's choice and its index rows' removal are one write transaction (a promotion cannot slip
        in between); the folders go afterwards. Unindexed folders older than `ORPHAN_AGE_S` (saves killed
        before indexing) and dead temporary folders are swept too.
        """
        removed: list[Revision] = []
        for policy in self.policies():
            with self.catalogue.write() as conn:
                revisions = [self._revision(policy, rid, meta) for rid, meta in self.catalogue.rows(policy)]
                keep = {r.id for r in revisions[-keep_last:]} if keep_last > 0 else set()
                keep |= set(self.catalogue.aliases(policy, conn).values())
                for history in self.catalogue.histories(policy, conn).values():
                    keep |= set(history[-keep_history:]) if keep_history > 0 else set()
                by_id = {r.id: r for r in revisions}
                keep |= {by_id[i].parent.partition("@")[2] for i in list(keep) if i in by_id and by_id[i].parent}
                going = [r for r in revisions if r.id not in keep]
                if not dry_run:
                    self.catalogue.delete(conn, policy, [r.id for r in going])
            removed += going
            if not dry_run:
                for revision in going:
                    _remove_folder(revision.path)
                self._sweep(policy)
        return removed

    # -- internals -------------------------------------------------------------------------------------------

    def _revision(self, policy: str, revision_id: str, meta: dict[str, Any]) -> Revision:
        return Revision(policy=policy, id=revision_id, path=self.root / policy / "revisions" / revision_id, meta=meta)

    def _sweep(self, policy: str) -> None:
        """Remove folders of `policy` no index row names and no save can still be writing."""
        folder = self.root / policy / "revisions"
        if not folder.is_dir():
            return
        cutoff = time.time() - ORPHAN_AGE_S
        for path in folder.iterdir():
            try:
                old = path.stat().st_mtime < cutoff
            except FileNotFoundError:
                continue
            if old and (path.name.startswith(".") or self.catalogue.row(policy, path.name) is None):
                _remove_folder(path)


def _remove_folder(path: Path) -> None:
    """Rename aside, then delete: a reader holding the path sees the whole folder or none of it."""
    trash = path.with_name(f".trash.{path.name.lstrip('.')}.{os.getpid()}")
    try:
        os.rename(path, trash)
    except FileNotFoundError:
        return
    shutil.rmtree(trash, ignore_errors=True)

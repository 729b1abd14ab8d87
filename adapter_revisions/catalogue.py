"""The adapter store's index: one SQLite database in WAL mode beside the revision folders.

A catalogue of 10⁵–10⁶ revisions cannot live in a JSON file rewritten at every save, nor be found by
listing folders. Here each lookup (an alias, a revision id or a unique id prefix) is one B-tree probe and
each save one short write transaction, whatever the catalogue holds. WAL mode lets any number of readers
run while one writer commits, so a server resolving `judge@prod` is never blocked by a trainer saving;
writers (several trainers, `mrjudge adapters promote`) take turns through SQLite's own lock
(`BEGIN IMMEDIATE` with a busy timeout), across processes and threads alike.

    ROOT/catalogue.sqlite      revisions (policy, id, created, meta), aliases, alias history, policies

The revision folders stay PEFT's own format and each keeps its `revision.json`, so a folder is
self-describing; the index is what makes a folder *visible*. A save writes and fsyncs its folder first
and commits its index row second, so a save killed at any point leaves either nothing visible or a whole
revision. A store written by an older version (`ROOT/<policy>/refs.json`) is migrated on first open: the
index is built in a temporary file and renamed into place, so a crash mid-migration leaves the old store
as it was, and the next open migrates again.
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["CATALOGUE", "Catalogue"]

CATALOGUE = "catalogue.sqlite"
SCHEMA_VERSION = 1
BUSY_TIMEOUT_MS = 60_000
"""How long a writer waits for another writer's transaction before giving up."""
CHECKPOINT_EVERY = 32
"""Write transactions between two background checkpoints of the WAL (a few hundred pages)."""
CHECKPOINT_ROWS = 1_000
"""Rows changed between two background checkpoints, whichever comes first (an `add_many` chunk is one
transaction of a thousand rows: counted by transactions alone, the WAL grew to 250 MB at 10⁶)."""
WAL_SIZE_LIMIT = 64 * 2**20
"""What a checkpointed WAL file is cut back to (`journal_size_limit`): it is reused, not grown forever."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS policies (policy TEXT PRIMARY KEY) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS revisions (
    policy TEXT NOT NULL,
    id TEXT NOT NULL,
    created REAL NOT NULL,
    meta TEXT NOT NULL,
    PRIMARY KEY (policy, id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS revisions_by_age ON revisions (policy, created, id);
CREATE TABLE IF NOT EXISTS aliases (
    policy TEXT NOT NULL,
    alias TEXT NOT NULL,
    revision TEXT NOT NULL,
    PRIMARY KEY (policy, alias)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS alias_history (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    policy TEXT NOT NULL,
    alias TEXT NOT NULL,
    revision TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS alias_history_by_alias ON alias_history (policy, alias, seq);
"""


class Catalogue:
    """The SQLite index of one store root. Thread- and process-safe; one connection per thread.

    Rows are `(id, created, meta)`; `meta` is the revision's `revision.json` as a dict.
    """

    def __init__(self, root: Path, history_length: int) -> None:
        self.root = root
        self.path = root / CATALOGUE
        self.history_length = history_length
        self._local = threading.local()
        self._writes = 0

    # -- connections and migration ---------------------------------------------------------------------------

    def exists(self) -> bool:
        return self.path.is_file() or _legacy_policies(self.root) != []

    def _connection(self) -> sqlite3.Connection:
        held = getattr(self._local, "conn", None)
        if held is not None and held[0] == os.getpid():
            return held[1]
        if not self.path.is_file():
            self._create()
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            conn.execute("PRAGMA journal_mode = WAL")  # persistent: recorded in the database file
        # In WAL mode NORMAL never corrupts the index; a power cut may lose the last commits, whose folders
        # then stay invisible until saved again (a process crash loses nothing).
        conn.execute("PRAGMA synchronous = NORMAL")
        # No checkpoint inside a commit: SQLite's automatic one (every 1,000 WAL pages) made the save that
        # crossed the line wait 5-6 ms on copying pages and fsyncs. `write` asks the background one instead.
        conn.execute("PRAGMA wal_autocheckpoint = 0")
        conn.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT}")
        self._local.conn = (os.getpid(), conn)
        return conn

    def _create(self) -> None:
        """Build the index in a temporary file (migrating `refs.json` stores) and rename it into place."""
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".catalogue.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one process migrates; the others wait, then open its result
            if self.path.is_file():
                return
            for stale in self.root.glob(f".{CATALOGUE}.*"):
                stale.unlink(missing_ok=True)  # a migration that died half way
            staging = self.root / f".{CATALOGUE}.{os.getpid()}"
            conn = sqlite3.connect(staging, isolation_level=None)
            try:
                conn.executescript(_SCHEMA)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                legacy = _legacy_policies(self.root)
                conn.execute("BEGIN")
                for policy in legacy:
                    self._import_legacy(conn, policy)
                conn.execute("COMMIT")
            finally:
                conn.close()
            with open(staging, "rb") as handle:
                os.fsync(handle.fileno())
            os.rename(staging, self.path)
            fsync_path(self.root)
            for policy in legacy:  # the index now owns the aliases; keep the old file for reference only
                refs = self.root / policy / "refs.json"
                if refs.is_file():
                    os.replace(refs, refs.with_name("refs.json.migrated"))

    def _import_legacy(self, conn: sqlite3.Connection, policy: str) -> None:
        folder = self.root / policy
        conn.execute("INSERT OR IGNORE INTO policies VALUES (?)", (policy,))
        for path in sorted((folder / "revisions").iterdir()):
            meta_file = path / "revision.json"
            if path.name.startswith(".") or not meta_file.is_file():
                continue  # a save that died before its rename, or a gc's trash
            meta = json.loads(meta_file.read_text())
            conn.execute(
                "INSERT OR IGNORE INTO revisions VALUES (?, ?, ?, ?)",
                (policy, path.name, float(meta.get("created", 0.0)), json.dumps(meta, sort_keys=True)),
            )
        refs_file = folder / "refs.json"
        refs = json.loads(refs_file.read_text()) if refs_file.is_file() else {}
        for alias, revision in sorted(refs.get("aliases", {}).items()):
            conn.execute("INSERT OR REPLACE INTO aliases VALUES (?, ?, ?)", (policy, alias, revision))
        for alias, history in sorted(refs.get("history", {}).items()):
            conn.executemany(
                "INSERT INTO alias_history (policy, alias, revision) VALUES (?, ?, ?)",
                [(policy, alias, revision) for revision in history[-self.history_length :]],
            )
        if "latest" not in refs.get("aliases", {}):  # folders copied in by hand: latest is the newest one
            newest = conn.execute(
                "SELECT id FROM revisions WHERE policy = ? ORDER BY created DESC, id DESC LIMIT 1", (policy,)
            ).fetchone()
            if newest is not None:
                self.move_alias(conn, policy, "latest", newest[0])

    def ensure(self) -> None:
        """Create the index now if there is none. A writer calls this before it writes a revision folder: a
        first index built while another process's save is in flight would otherwise import that save's folder
        as an older store's revision (and move `latest` for it once more)."""
        self._connection()

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction: other writers wait (across processes), readers go on reading."""
        conn = self._connection()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        self._writes += 1
        changed = conn.total_changes - getattr(self._local, "changes_mark", 0)  # this thread's connection
        if self._writes >= CHECKPOINT_EVERY or changed >= CHECKPOINT_ROWS:
            self._writes, self._local.changes_mark = 0, conn.total_changes
            CHECKPOINTER.request(self.path)

    def read(self) -> sqlite3.Connection | None:
        """A connection for reading, or None for a store nothing was ever saved to (nothing is created)."""
        if getattr(self._local, "conn", None) is None and not self.exists():
            return None
        return self._connection()

    # -- queries ---------------------------------------------------------------------------------------------

    def policies(self) -> list[str]:
        conn = self.read()
        return [] if conn is None else [p for (p,) in conn.execute("SELECT policy FROM policies ORDER BY policy")]

    def has_policy(self, policy: str) -> bool:
        conn = self.read()
        return (
            conn is not None
            and conn.execute("SELECT 1 FROM policies WHERE policy = ?", (policy,)).fetchone() is not None
        )

    def row(self, policy: str, revision_id: str) -> dict[str, Any] | None:
        conn = self.read()
        if conn is None:
            return None
        found = conn.execute("SELECT meta FROM revisions WHERE policy = ? AND id = ?", (policy, revision_id)).fetchone()
        return None if found is None else json.loads(found[0])

    def by_prefix(self, policy: str, prefix: str, limit: int = 2) -> list[tuple[str, dict[str, Any]]]:
        """Up to `limit` revisions whose id starts with `prefix` (an index range scan: ids are hex)."""
        conn = self.read()
        if conn is None:
            return []
        rows = conn.execute(
            "SELECT id, meta FROM revisions WHERE policy = ? AND id >= ? AND id < ? ORDER BY id LIMIT ?",
            (policy, prefix, prefix + "g", limit),
        )
        return [(rid, json.loads(meta)) for rid, meta in rows]

    def rows(self, policy: str) -> list[tuple[str, dict[str, Any]]]:
        """Every revision of `policy`, oldest first."""
        conn = self.read()
        if conn is None:
            return []
        rows = conn.execute("SELECT id, meta FROM revisions WHERE policy = ? ORDER BY created, id", (policy,))
        return [(rid, json.loads(meta)) for rid, meta in rows]

    def alias(self, policy: str, alias: str) -> str | None:
        conn = self.read()
        if conn is None:
            return None
        found = conn.execute("SELECT revision FROM aliases WHERE policy = ? AND alias = ?", (policy, alias)).fetchone()
        return None if found is None else found[0]

    def aliases(self, policy: str, conn: sqlite3.Connection | None = None) -> dict[str, str]:
        conn = conn or self.read()
        if conn is None:
            return {}
        return dict(conn.execute("SELECT alias, revision FROM aliases WHERE policy = ?", (policy,)).fetchall())

    def history(self, policy: str, alias: str, conn: sqlite3.Connection | None = None) -> list[str]:
        conn = conn or self.read()
        if conn is None:
            return []
        rows = conn.execute(
            "SELECT revision FROM alias_history WHERE policy = ? AND alias = ? ORDER BY seq", (policy, alias)
        )
        return [r for (r,) in rows]

    def histories(self, policy: str, conn: sqlite3.Connection) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for alias, revision in conn.execute(
            "SELECT alias, revision FROM alias_history WHERE policy = ? ORDER BY seq", (policy,)
        ):
            out.setdefault(alias, []).append(revision)
        return out

    # -- writes (inside `write()`) ---------------------------------------------------------------------------

    def insert(self, conn: sqlite3.Connection, policy: str, revision_id: str, meta: dict[str, Any]) -> None:
        """Index a revision whose folder is complete; a twin already indexed keeps its metadata."""
        conn.execute("INSERT OR IGNORE INTO policies VALUES (?)", (policy,))
        conn.execute(
            "INSERT OR IGNORE INTO revisions VALUES (?, ?, ?, ?)",
            (policy, revision_id, float(meta.get("created", 0.0)), json.dumps(meta, sort_keys=True)),
        )

    def move_alias(self, conn: sqlite3.Connection, policy: str, alias: str, revision_id: str) -> None:
        """Point `alias` at `revision_id` and remember the move (the last `history_length` moves)."""
        current = conn.execute(
            "SELECT revision FROM aliases WHERE policy = ? AND alias = ?", (policy, alias)
        ).fetchone()
        if current is not None and current[0] == revision_id:
            return
        conn.execute("INSERT OR REPLACE INTO aliases VALUES (?, ?, ?)", (policy, alias, revision_id))
        conn.execute(
            "INSERT INTO alias_history (policy, alias, revision) VALUES (?, ?, ?)", (policy, alias, revision_id)
        )
        cutoff = conn.execute(
            "SELECT seq FROM alias_history WHERE policy = ? AND alias = ? ORDER BY seq DESC LIMIT 1 OFFSET ?",
            (policy, alias, self.history_length),
        ).fetchone()
        if cutoff is not None:
            conn.execute(
                "DELETE FROM alias_history WHERE policy = ? AND alias = ? AND seq <= ?", (policy, alias, cutoff[0])
            )

    def pop_history(self, conn: sqlite3.Connection, policy: str, alias: str) -> str | None:
        """Undo `alias`'s last move: the revision it points at now, or None if there is no earlier one."""
        last_two = conn.execute(
            "SELECT seq, revision FROM alias_history WHERE policy = ? AND alias = ? ORDER BY seq DESC LIMIT 2",
            (policy, alias),
        ).fetchall()
        if len(last_two) < 2:
            return None
        conn.execute("DELETE FROM alias_history WHERE seq = ?", (last_two[0][0],))
        conn.execute("INSERT OR REPLACE INTO aliases VALUES (?, ?, ?)", (policy, alias, last_two[1][1]))
        return last_two[1][1]

    def delete(self, conn: sqlite3.Connection, policy: str, revision_ids: list[str]) -> None:
        conn.executemany("DELETE FROM revisions WHERE policy = ? AND id = ?", [(policy, r) for r in revision_ids])


def _legacy_policies(root: Path) -> list[str]:
    """Policies of a store an older version wrote (a `revisions` folder, no index yet)."""
    if not root.is_dir() or (root / CATALOGUE).is_file():
        return []
    return sorted(p.name for p in root.iterdir() if not p.name.startswith(".") and (p / "revisions").is_dir())


class _Checkpointer:
    """One background thread per process that copies WAL pages back into the index files it is handed
    (`PRAGMA wal_checkpoint(PASSIVE)`: it waits for no reader or writer), off every save's path."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: set[Path] = set()
        self._wake = threading.Condition(self._lock)
        self._busy = False
        self._thread: threading.Thread | None = None
        self._pid = 0

    def request(self, path: Path) -> None:
        with self._lock:
            self._pending.add(path)
            if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
                self._pid = os.getpid()
                self._thread = threading.Thread(target=self._run, name="mrjudge-catalogue-checkpoint", daemon=True)
                self._thread.start()
            self._wake.notify()

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """Until every requested checkpoint ran (tests, and a process that wants its WAL folded in now)."""
        with self._lock:
            return self._wake.wait_for(lambda: not self._pending and not self._busy, timeout)

    def _run(self) -> None:
        while True:
            with self._lock:
                self._wake.wait_for(lambda: bool(self._pending))
                paths, self._pending, self._busy = list(self._pending), set(), True
            for path in paths:
                try:
                    # mode=rw: a store deleted meanwhile must not come back as an empty index file
                    uri = f"{path.resolve().as_uri()}?mode=rw"
                    conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
                    try:
                        conn.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT}")
                        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
                    finally:
                        conn.close()
                except sqlite3.Error:
                    pass  # a store deleted meanwhile, or busy: the next request checkpoints it
            with self._lock:
                self._busy = False
                self._wake.notify_all()


CHECKPOINTER = _Checkpointer()


def fsync_path(path: Path) -> None:
    """Flush a file or a folder to disk by path; a folder's fsync makes the renames and new names in it durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

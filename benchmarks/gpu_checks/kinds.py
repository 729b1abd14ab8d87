"""The same outputs on the device as on the CPU: outputs compared by kind (keys, types), not by value.

Values differ between bf16 on a GPU and float32 on the CPU and are reported, not compared; what must not differ
is the shape of what a run writes, and the verdict contract.
"""

from __future__ import annotations

from typing import Any

VERDICT_KEYS = {"id", "choice", "probs", "consistent", "votes", "reasoning", "raw"}
"""The verdict contract's keys (docs/architecture.md, "Verdict"); `usage` may follow."""


def kind_of(value: Any) -> Any:
    """A value's shape as types: dict keys kept, lists by their first element, None as 'null'."""
    if isinstance(value, dict):
        return {k: kind_of(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [kind_of(value[0])] if value else []
    if value is None:
        return "null"
    return "number" if isinstance(value, (int, float)) and not isinstance(value, bool) else type(value).__name__


def same_kind(a: Any, b: Any) -> list[str]:
    """Where two outputs differ in kind (None may stand for any type: unparsed verdicts, no log-probs)."""
    ka, kb = kind_of(a), kind_of(b)

    def walk(x: Any, y: Any, path: str) -> list[str]:
        if "null" in (x, y):
            return []
        if isinstance(x, dict) and isinstance(y, dict):
            if set(x) != set(y):
                return [f"{path or '.'}: keys {sorted(set(x) ^ set(y))} differ"]
            return [d for k in x for d in walk(x[k], y[k], f"{path}.{k}")]
        if isinstance(x, list) and isinstance(y, list):
            return walk(x[0], y[0], f"{path}[0]") if x and y else []
        return [] if x == y else [f"{path}: {x} vs {y}"]

    return walk(ka, kb, "")


def verdict_problems(rows: list[dict[str, Any]]) -> list[str]:
    """What breaks the verdict contract in `mrjudge judge`'s output rows (empty: none)."""
    problems = []
    for row in rows:
        missing = VERDICT_KEYS - set(row)
        if missing:
            problems.append(f"{row.get('id')}: missing {sorted(missing)}")
        elif row["probs"] is not None and abs(sum(row["probs"]) - 1) > 1e-3:
            problems.append(f"{row.get('id')}: probs sum to {sum(row['probs'])}")
    return problems

"""What a missing optional environment (the frameworks folder, the vLLM venv) does to the tests that need it."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

import pytest

T = TypeVar("T")


def found_or_skip(find: Callable[[], T], missing: type[Exception], require_env: str) -> T:
    """`find()`; where it raises `missing`, the test skips with that message, or fails where `require_env` is "1"
    (`make test` sets it, hence CI: there a missing environment is an error, not a skip)."""
    try:
        return find()
    except missing as exc:
        if os.environ.get(require_env) == "1":
            pytest.fail(f"{require_env}=1 but {exc}", pytrace=False)
        pytest.skip(str(exc))

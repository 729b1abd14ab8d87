"""LoRA adapter revisions: a store shared by trainers and servers, base fingerprints, a serving pool."""

from judge.adapters.fingerprint import base_fingerprint
from judge.adapters.store import (
    AdapterStore,
    AdapterStoreError,
    BaseMismatchError,
    Revision,
    check_base,
    split_ref,
)

__all__ = [
    "AdapterStore",
    "AdapterStoreError",
    "BaseMismatchError",
    "Revision",
    "base_fingerprint",
    "check_base",
    "split_ref",
]

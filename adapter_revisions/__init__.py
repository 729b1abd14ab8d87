"""LoRA adapter revisions: a store shared by trainers and servers, base fingerprints, a serving pool."""

from adapter_revisions.fingerprint import base_fingerprint
from adapter_revisions.store import (
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

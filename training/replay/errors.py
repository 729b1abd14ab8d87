"""The one error replay raises when it cannot reproduce the full-sequence forward (the message says the fix)."""

from __future__ import annotations


class ReplayUnsupportedError(ValueError):
    """Replay cannot reproduce this model's full-sequence forward exactly; the message says why and what to do."""

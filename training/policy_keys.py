"""The policy recipe's `reward` keys as users type them: dotted overrides, and the flat `judge_*` keys of before.

    mrjudge train policy --config configs/policy_grpo_qwen2_5_vl_7b.yaml reward.url=http://judge-node:8000 \\
        reward.retry.max_retries=5

`nest_reward_keys` folds both into the nested `reward` mapping (`judge.reward.trl.spec`) before the config is
checked. An old key still works, with one warning naming its new spelling; as before, the settings of the
other transport among old keys (an in-process judge's budget beside a server's url) are ignored.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Mapping
from typing import Any

from judge.config import put_dotted
from judge.reward.trl.spec import TRANSPORTS

__all__ = ["LEGACY_REWARD_KEYS", "nest_reward_keys"]

LEGACY_REWARD_KEYS = {
    "judge_server_url": "url",
    "judge_model": "model",
    "judge_backend": "backend",
    "judge_device": "device",
    "judge_config_file": "config_file",
    "judge_mode": "mode",
    "judge_tournament": "tournament",
    "judge_reference_column": "reference_column",
    "judge_max_options": "max_options",
    "judge_orders": "judge.orders",
    "judge_max_new_tokens": "judge.max_new_tokens",
    "judge_batch_size": "judge.batch_size",
    "judge_api_key_env": "api_key_env",
    "judge_timeout_s": "retry.timeout_s",
    "judge_max_retries": "retry.max_retries",
    "judge_backoff_s": "retry.backoff_s",
    "judge_max_concurrency": "max_concurrency",
}
"""The recipe's flat fields before the nested `reward`, and where each now lives under it."""


def _transport_of_legacy(reward: dict[str, Any], legacy: set[str]) -> str | None:
    """Before, the transport was whichever of judge_server_url / judge_model was set."""
    if "url" in legacy or "model" in legacy:
        if reward.get("url") is not None and reward.get("model") is None:
            return "http"
        if reward.get("model") is not None and reward.get("url") is None:
            return "in_process"
    return reward.get("transport")


def nest_reward_keys(values: Mapping[str, Any]) -> dict[str, Any]:
    """`values` with `reward.a.b=…` keys and old `judge_*` keys folded into the `reward` mapping.

    >>> import warnings; warnings.simplefilter("ignore", FutureWarning)
    >>> nest_reward_keys({"judge_server_url": "http://j:8000", "judge_max_new_tokens": 1024, "reward.mode": "pairwise"})
    {'reward': {'url': 'http://j:8000', 'transport': 'http', 'mode': 'pairwise'}}
    """
    values = dict(values)
    legacy = {key: values.pop(key) for key in list(values) if key in LEGACY_REWARD_KEYS}
    dotted = {key: values.pop(key) for key in list(values) if key.startswith("reward.")}
    if not legacy and not dotted:
        return values
    given = values.get("reward")
    if given is not None and not isinstance(given, Mapping):
        raise ValueError(f"reward must be a mapping (e.g. reward={{transport: http, url: …}}), got {given!r}")
    reward = copy.deepcopy(dict(given or {}))
    if legacy:
        for old, value in legacy.items():
            put_dotted(reward, LEGACY_REWARD_KEYS[old], value)
        transport = _transport_of_legacy(reward, {LEGACY_REWARD_KEYS[old].split(".")[0] for old in legacy})
        ignored = []
        if transport in TRANSPORTS:
            reward["transport"] = transport
            valid = TRANSPORTS[transport].keys()
            other = [key for key in reward if key != "transport" and key not in valid]
            ignored = [key for key in other if reward.pop(key) is not None]
        renames = ", ".join(f"{old} → reward.{LEGACY_REWARD_KEYS[old]}" for old in legacy)
        note = f" (ignored with transport {transport}: {', '.join(ignored)})" if ignored else ""
        warnings.warn(f"the flat judge_* fields are now nested under reward: {renames}{note}", FutureWarning, 2)
    for key, value in dotted.items():
        put_dotted(reward, key.removeprefix("reward."), value)
    values["reward"] = reward
    return values

"""The reward files in judge/integrations loaded as the frameworks load them: by path, not by import."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import judge.integrations


def load_openrlhf_file() -> ModuleType:
    """`judge/integrations/openrlhf.py` (beside the `judge.integrations` this process imports) as OpenRLHF loads
    a `--reward.remote_url` file: by path, as a fresh module named "reward_func" on each call."""
    path = Path(judge.integrations.__file__).with_name("openrlhf.py")
    spec = importlib.util.spec_from_file_location("reward_func", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

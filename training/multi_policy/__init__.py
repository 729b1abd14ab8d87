"""Concurrent multi-policy GRPO over one resident base model (`mrjudge train policies`)."""

from training.multi_policy.config import MultiPolicyConfig, PolicySpec, load_multi_policy_config
from training.multi_policy.trainer import MultiPolicyTrainer, run_policies

__all__ = ["MultiPolicyConfig", "MultiPolicyTrainer", "PolicySpec", "load_multi_policy_config", "run_policies"]

"""`ServerConfig`: every knob of `mrjudge serve` in one dataclass, loadable from YAML.

from judge.config import config_from_yaml
config = config_from_yaml(ServerConfig, "configs/serve.yaml", {"port": 9000})
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

__all__ = ["API_KEY_ENV", "ServerConfig"]

API_KEY_ENV = "MRJUDGE_SERVER_API_KEY"
"""Environment variable the API key is read from when no `--api-key` is given."""


@dataclass
class ServerConfig:
    """How the reward server listens, batches and what it refuses. Defaults are safe for a public port."""

    # Network and access
    host: str = field(default="127.0.0.1", metadata={"help": "address to bind; loopback unless told otherwise"})
    port: int = field(default=8000, metadata={"help": "TCP port"})
    api_key: str | None = field(
        default=None,
        metadata={"help": f"if set, all endpoints but /health need `Authorization: Bearer KEY` (env ${API_KEY_ENV})"},
    )

    # Dynamic batching
    max_batch_items: int = field(
        default=32,
        metadata={"help": "MC items per judge batch; 1 turns batching off (one request at a time)"},
    )
    max_wait_ms: float = field(
        default=10.0, metadata={"help": "how long the first request of a batch waits for others to join"}
    )
    max_queue: int = field(
        default=256, metadata={"help": "requests waiting for the judge; more are answered 503 with Retry-After"}
    )
    request_timeout_s: float = field(default=120.0, metadata={"help": "queue wait + judging per request; then 504"})

    # Input limits (each violation is a 4xx naming the field)
    max_body_bytes: int = field(default=32 * 2**20, metadata={"help": "request body size (413 above)"})
    max_image_bytes: int = field(default=8 * 2**20, metadata={"help": "encoded size of one image (413 above)"})
    max_image_pixels: int = field(
        default=16_000_000, metadata={"help": "width × height of one image, read from its header before decoding"}
    )
    max_images: int = field(default=8, metadata={"help": "images per item or per reward request"})
    max_candidates: int = field(
        default=8,
        metadata={"help": "candidates per MC item, and the judge's option limit (larger reward groups: tournament)"},
    )
    max_responses: int = field(default=64, metadata={"help": "responses per /v1/reward request"})
    max_text_chars: int = field(default=32_000, metadata={"help": "characters per prompt, question or answer"})
    max_items: int = field(default=512, metadata={"help": "items per /v1/judge request, queries per /get_reward"})
    allow_local_images: str | None = field(
        default=None,
        metadata={"help": "folder whose image files clients may name by path; None refuses every file path"},
    )

    # Reward groups for OpenRLHF, which posts one sample per /get_reward request
    group_size: int = field(
        default=1,
        metadata={
            "help": "/get_reward holds samples with the same prompt, images and label until this many have "
            "arrived, then judges them as one group (set it to OpenRLHF's --rollout.n_samples_per_prompt); "
            "1 judges each request on its own"
        },
    )
    group_wait_s: float = field(
        default=60.0,
        metadata={"help": "how long a partial /get_reward group waits for the rest before it is judged as it is"},
    )

    # LoRA adapters over the resident base (requests name `policy@alias` or `policy@revision` as "model")
    adapter_store: str | None = field(
        default=None, metadata={"help": "adapter store folder (`mrjudge adapters`); None serves the base model only"}
    )
    max_adapters: int = field(
        default=4, metadata={"help": "adapters kept loaded; beyond it the least recently used is unloaded"}
    )
    base_fingerprint: str | None = field(
        default=None,
        metadata={
            "help": "fingerprint of the served base (`mrjudge adapters fingerprint MODEL`); computed from the "
            "weights for in-process backends, required for a remote engine"
        },
    )

    def __post_init__(self) -> None:
        if self.api_key is not None and not self.api_key.strip():
            raise ValueError("api_key is empty; give a non-empty key or none")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port ({self.port}) must be in [0, 65535]")
        positive = (
            "max_batch_items",
            "max_queue",
            "max_body_bytes",
            "max_image_bytes",
            "max_image_pixels",
            "max_images",
            "max_responses",
            "max_text_chars",
            "max_items",
            "max_adapters",
        )
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} ({getattr(self, name)}) must be at least 1")
        if self.group_size < 1 or self.group_wait_s <= 0:
            raise ValueError(f"need group_size >= 1 ({self.group_size}) and group_wait_s > 0 ({self.group_wait_s})")
        if self.max_wait_ms < 0:
            raise ValueError(f"max_wait_ms ({self.max_wait_ms}) must be >= 0")
        if self.request_timeout_s <= 0:
            raise ValueError(f"request_timeout_s ({self.request_timeout_s}) must be > 0")
        if not 2 <= self.max_candidates <= 26:
            raise ValueError(f"max_candidates ({self.max_candidates}) must be in [2, 26] (option letters A-Z)")
        if self.adapter_store is not None and not os.path.isdir(self.adapter_store):
            raise ValueError(f"adapter_store ({self.adapter_store}) is not a folder; create it or fix the path")
        if self.allow_local_images is not None and not os.path.isdir(self.allow_local_images):
            raise ValueError(f"allow_local_images ({self.allow_local_images}) is not a folder")

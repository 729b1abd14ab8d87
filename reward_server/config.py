"""`ServerConfig`: every knob of `mrjudge serve` in one dataclass, loadable from YAML.

from judge.config import config_from_yaml
config = config_from_yaml(ServerConfig, "configs/serve.yaml", {"port": 9000})
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from judge.config import check_at_least_one, fold_dotted_keys, setting
from judge.reward.audit.config import AuditConfig
from judge.reward.wire import API_KEY_ENV  # read when no `--api-key` is given; every reward client sends it

__all__ = ["API_KEY_ENV", "ServerConfig", "is_loopback", "server_audit"]


def is_loopback(host: str) -> bool:
    """Whether `host` only listens to this machine (127.0.0.0/8, ::1, localhost)."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


@dataclass
class ServerConfig:
    """How the reward server listens, batches and what it refuses. Defaults are safe for a public port."""

    # Network and access
    host: str = setting("127.0.0.1", "address to bind; loopback unless told otherwise")
    port: int = setting(8000, "TCP port")
    api_key: str | None = setting(
        None,
        "if set, all endpoints but /health and the API description (/docs, /openapi.json) need "
        f"`Authorization: Bearer KEY`; prefer ${API_KEY_ENV} or "
        "api_key_file (a flag's value shows in `ps`)",
    )
    api_key_file: str | None = setting(None, "file holding the API key (surrounding whitespace dropped)")
    allow_unauthenticated: bool = setting(
        False, "serve a non-loopback host without an API key (refused otherwise): anyone can use the judge"
    )

    # Dynamic batching
    max_batch_items: int = setting(32, "MC items per judge batch; 1 turns batching off (one request at a time)")
    max_wait_ms: float = setting(
        10.0,
        "how long a batch waits for the next request to join, from its first request and then from "
        "each that joins (in all at most 10 times this, `LINGER`); it closes at once when full",
    )
    max_queue: int = setting(256, "requests waiting for the judge; more are answered 503 with Retry-After")
    request_timeout_s: float = setting(
        120.0, "queue wait + judging per request; then 504 and its remaining work is cancelled"
    )
    shutdown_grace_s: float = setting(
        25.0,
        "on SIGTERM, in-flight requests get this long (less 2 s for cancelling) before the rest is "
        "cancelled; the process is gone within it (fits Kubernetes' default 30 s)",
    )
    body_timeout_s: float = setting(30.0, "time to receive a whole request body; then 408 (slow-body clients)")
    switch_interval_ms: float = setting(
        20.0,
        "the server process's GIL switch interval (Python's default is 5): the judge thread and the "
        "event loop share one GIL, and a longer interval lets the judge run its batches with fewer forced "
        "hand-overs (a tiny CPU judge at saturation: ~4 % more judgments/s); the loop then waits up to this "
        "long while the judge runs pure Python",
    )

    # Logging
    log_interval_s: float = setting(
        60.0,
        "refusals, failures and unscored samples are logged at once the first time per reason, then "
        "summarised at most once per this many seconds per reason (counts are in /metrics)",
    )
    access_log: bool = setting(False, "uvicorn's line per request; off by default: an RL run sends thousands a step")

    # Input limits (each violation is a 4xx naming the field)
    max_body_bytes: int = setting(32 * 2**20, "request body size (413 above)")
    max_json_values: int = setting(
        1_000_000,
        "commas and colons in a body, an upper bound on its JSON values, counted before parsing (413 "
        "above): Python's parser holds the GIL, ~1 s for 3 million tiny values; text's own commas count too",
    )
    max_image_bytes: int = setting(8 * 2**20, "encoded size of one image (413 above)")
    max_image_pixels: int = setting(16_000_000, "width × height of one image, read from its header before decoding")
    max_images: int = setting(8, "images per item or per reward request")
    max_candidates: int = setting(
        8, "candidates per MC item, and the judge's option limit (larger reward groups: tournament)"
    )
    max_responses: int = setting(64, "responses per /v1/reward request")
    max_text_chars: int = setting(32_000, "characters per prompt, question or answer")
    max_items: int = setting(512, "items per /v1/judge request, queries per /get_reward")
    max_request_items: int = setting(
        2048,
        "judge work per request, in the MC items its reward plan expands to (a round-robin of G "
        "responses is G(G-1)/2); 413 above, before any decoding or queueing",
    )
    max_request_pixels: int = setting(
        100_000_000, "width × height summed over a request's distinct images, read from headers (413 above)"
    )
    allow_local_images: str | None = setting(
        None, "folder whose image files clients may name by path; None refuses every file path"
    )

    # Reward groups for OpenRLHF, which posts one sample per /get_reward request
    group_size: int = setting(
        1,
        "/get_reward holds samples with the same prompt, images and label until this many have "
        "arrived, then judges them as one group (set it to OpenRLHF's --rollout.n_samples_per_prompt); "
        "1 judges each request on its own",
    )
    group_wait_s: float = setting(
        60.0, "how long a partial /get_reward group waits for the rest before it is judged as it is"
    )

    # LoRA adapters over the resident base (requests name `policy@alias` or `policy@revision` as "model")
    adapter_store: str | None = setting(
        None, "adapter store folder (`mrjudge adapters`); None serves the base model only"
    )
    max_adapters: int = setting(4, "adapters kept loaded; beyond it the least recently used is unloaded")
    reserve_adapter_slots: bool = setting(
        False,
        "allocate max_adapters adapter slots at start, shaped like a revision of the store, so that no "
        "cold load builds one while requests wait (as vLLM allocates --max-loras); costs their memory at once",
    )
    base_fingerprint: str | None = setting(
        None,
        "fingerprint of the served base (`mrjudge adapters fingerprint MODEL`); computed from the "
        "weights for in-process backends, required for a remote engine",
    )

    # The reward audit (judge.reward.audit): a seeded share of the judged groups scored again, beside the reward
    audit: AuditConfig | dict[str, Any] | None = setting(
        None,
        "audit a seeded share of the judged reward groups against a gold, beside the reward (which it "
        "never delays or changes): an AuditConfig mapping, e.g. {auditor: answer_key, audit_rate: 0.05, path: "
        "runs/serve/audit.jsonl}; the gold key is each request's reference (a /get_reward label's); auditors: "
        "answer_key, answer_key:pkg.mod:fn, judge_url:http://host:port (self is the client's: its reward's "
        "audit); figures on /metrics as mrjudge_audit_*. Flags: --audit-auditor, --audit-rate, --audit-window, "
        "--audit-path; YAML: an audit: block; one key: audit.seed=3. None: no audit",
    )

    @staticmethod
    def nest_config_values(values: dict[str, Any]) -> dict[str, Any]:
        """`audit.auditor=…` overrides (the `--audit-*` flags) folded into `audit` (`judge.config` asks)."""
        return fold_dotted_keys(values, ["audit"])

    def __post_init__(self) -> None:
        self.audit = server_audit(self.audit)
        if self.api_key_file is not None:
            if self.api_key is not None:
                raise ValueError("give api_key or api_key_file, not both")
            try:
                self.api_key = Path(self.api_key_file).read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError) as exc:
                raise ValueError(f"api_key_file ({self.api_key_file}) cannot be read: {exc}") from None
            if not self.api_key:
                raise ValueError(f"api_key_file ({self.api_key_file}) is empty; write the key into it")
        if self.api_key is not None and not self.api_key.strip():
            raise ValueError("api_key is empty; give a non-empty key or none")
        if self.api_key is None and not self.allow_unauthenticated and not is_loopback(self.host):
            raise ValueError(
                f"host {self.host} is reachable from the network and no API key is set: give one (api_key_file, "
                f"${API_KEY_ENV}) or, to serve everyone on purpose, allow_unauthenticated (--allow-unauthenticated)"
            )
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port ({self.port}) must be in [0, 65535]")
        positive = (
            "max_batch_items",
            "max_queue",
            "max_body_bytes",
            "max_json_values",
            "max_image_bytes",
            "max_image_pixels",
            "max_images",
            "max_responses",
            "max_text_chars",
            "max_items",
            "max_request_items",
            "max_request_pixels",
            "max_adapters",
        )
        check_at_least_one(self, positive)
        if self.group_size < 1 or self.group_wait_s <= 0:
            raise ValueError(f"need group_size >= 1 ({self.group_size}) and group_wait_s > 0 ({self.group_wait_s})")
        if self.max_wait_ms < 0:
            raise ValueError(f"max_wait_ms ({self.max_wait_ms}) must be >= 0")
        for name in ("request_timeout_s", "shutdown_grace_s", "body_timeout_s", "log_interval_s", "switch_interval_ms"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} ({getattr(self, name)}) must be > 0")
        if not 2 <= self.max_candidates <= 26:
            raise ValueError(f"max_candidates ({self.max_candidates}) must be in [2, 26] (option letters A-Z)")
        if self.adapter_store is not None and not os.path.isdir(self.adapter_store):
            raise ValueError(f"adapter_store ({self.adapter_store}) is not a folder; create it or fix the path")
        if self.allow_local_images is not None and not os.path.isdir(self.allow_local_images):
            raise ValueError(f"allow_local_images ({self.allow_local_images}) is not a folder")


def server_audit(value: AuditConfig | dict[str, Any] | None) -> AuditConfig | None:
    """`ServerConfig.audit` read and checked for a server: an `AuditConfig`, or None for no audit.

    The server can only count, log and show (`/metrics`): what the trainer does with an alarm (`guard: stop`,
    `keep-best`), a dataset column as the gold key and the rewarding judge asked again (`self`) are the
    training side's, and are refused here with the fix.
    """
    try:
        audit = AuditConfig.from_value(dict(value) if isinstance(value, dict) else value)
    except (TypeError, ValueError) as exc:
        message = str(exc)
        raise ValueError(message if message.startswith(("audit ", "audit:")) else f"audit: {message}") from None
    if audit is None:
        return None
    if not audit.enabled:
        raise ValueError(
            "audit.auditor is not set: name who scores the gold (answer_key, answer_key:pkg.mod:fn or "
            "judge_url:http://host:port), or drop the audit settings"
        )
    if audit.auditor == "self":
        raise ValueError(
            "audit.auditor: self is not available on the reward server (its auditor sees a group's prompt, images, "
            "responses and reference, not the request's mode, tournament or adapter, so it cannot put the same "
            "question to the judge again): audit with answer_key or judge_url:http://host:port here, or set "
            "audit={'auditor': 'self'} on the client's reward (AsyncHttpJudgeReward(url, audit=...)), which asks "
            "this server again"
        )
    if audit.guard != "warn":
        raise ValueError(
            f"audit.guard ({audit.guard}): the server can only warn (the alarm is logged and shown on /metrics as "
            "mrjudge_audit_alarm); stop and keep-best are the trainer's: set them on the training run's reward "
            "audit, and guard: warn (the default) here"
        )
    if audit.answer_column is not None:
        raise ValueError(
            f"audit.answer_column ({audit.answer_column}): the server has no dataset columns; its gold key is each "
            "request's reference (a /get_reward label's); drop answer_column"
        )
    return audit

"""Where a policy's judge runs and how it rewards, as data: one spec per transport, nested in a recipe.

    reward: {transport: http, url: http://judge-node:8000, retry: {max_retries: 4, timeout_s: 300}}
    reward: {transport: http, url: [http://judge-1:8000, http://judge-2:8000]}   # or "http://judge-1:8000,http://…"
    reward: {transport: in_process, model: runs/judge, judge: {orders: 2, max_new_tokens: 512}}

`reward_spec(mapping)` reads either (`transport` may be left out when only `url` or only `model` is given)
and checks it at once; `spec.build(...)` makes the reward function (`judge.reward.trl.http` /
`judge.reward.trl.local`) when training starts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from judge.config import setting
from judge.reward.audit import AuditConfig
from judge.reward.trl.base import GroupedJudgeReward, check_reward_options
from judge.reward.wire import API_KEY_ENV, RetryPolicy, check_keys, server_api_key, server_urls

__all__ = ["TRANSPORTS", "HttpRewardSpec", "InProcessRewardSpec", "RewardSpec", "reward_spec"]


@dataclass(kw_only=True)
class _RewardOptions:
    """What both transports share: how a prompt's completions are judged, and how failures are retried."""

    transport: ClassVar[str]
    target: ClassVar[str]  # the transport's one required key: where the judge is
    mode: str = setting(
        "listwise", "listwise (the group as one MC question), pairwise (vs the reference) or tournament."
    )
    tournament: str = setting("knockout", "Tournament format: knockout (G - 1 games) or round_robin (G(G - 1)/2).")
    reference_column: str | None = setting("answer", "Column of reference answers (pairwise mode, lone completions).")
    max_options: int = setting(8, "Judge's option limit; larger listwise groups play a knock-out instead.")
    cap_at_reference: bool = setting(
        False,
        "Pairwise: reward min(1, 2p), p the judge's probability of beating the reference: a tie with "
        "the reference earns full reward, fooling the judge past it nothing more.",
    )
    retry: RetryPolicy = setting(
        help=f"Retries of failed judging: {{{', '.join(RetryPolicy.keys())}}}; then the group gets None.",
        factory=RetryPolicy,
    )
    audit: dict[str, Any] | None = setting(
        None,
        "Audit a seeded share of judged groups beside the reward (judge.reward.audit): {auditor: "
        "answer_key | answer_key:pkg.mod:fn | judge_url:URL | self, audit_rate: 0.05, guard: warn | stop | "
        "keep-best, path: …/audit.jsonl, …}. Figures are logged as judge/audit/….",
    )

    def __post_init__(self) -> None:
        self.retry = RetryPolicy.from_dict(self.retry)
        if self.audit is not None:  # checked now (a typo fails before training), kept as the mapping it was
            self.audit = dataclasses.asdict(AuditConfig.from_value(dict(self.audit)))  # type: ignore[arg-type]
        check_reward_options(self.mode, self.tournament, self.reference_column, self.max_options, self.cap_at_reference)
        where = getattr(self, self.target)
        if not where or not isinstance(where, str | list | tuple) or not self._valid_target(where):
            raise ValueError(
                f"reward.{self.target} must say where the judge is (transport {self.transport}), got {where!r}"
            )

    @staticmethod
    def _valid_target(where: Any) -> bool:
        return isinstance(where, str)

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Any:
        """The spec from a mapping; unknown keys fail with the valid ones."""
        check_keys(values, ("transport", *cls.keys()), f"reward (transport {cls.transport})")
        return cls(**{cls.target: None, **values})  # a missing target fails in __post_init__, naming it

    def to_dict(self) -> dict[str, Any]:
        """The mapping `reward_spec` reads back (what a resolved config saves)."""
        return {"transport": self.transport, **dataclasses.asdict(self)}

    def _options(self, image_columns: tuple[str, ...], name: str) -> dict[str, Any]:
        """The reward class's keywords for what both transports share."""
        shared = {key: getattr(self, key) for key in _RewardOptions.keys()}
        return {**shared, "image_columns": image_columns, "name": name}


@dataclass(kw_only=True)
class HttpRewardSpec(_RewardOptions):
    """The judge behind a reward server (`mrjudge serve`), shared by every training process."""

    url: str | list[str] = setting(
        help="Reward server root, e.g. http://judge-node:8000; or several replicas, a list or comma-separated "
        "(each group goes whole to the one with the fewest requests outstanding; a failed one is skipped)."
    )
    api_key_env: str = setting(
        API_KEY_ENV, "Environment variable holding the server's key (the key never enters a config file)."
    )
    max_concurrency: int = setting(16, "Reward requests in flight per process.")
    send_image_paths: bool = setting(
        False, "Send image paths as they are, for the server to read under its --allow-local-images."
    )
    replica_cooloff_s: float = setting(
        5.0, "With several urls: how long a replica that failed is skipped (doubling, up to 60 s)."
    )

    transport: ClassVar[str] = "http"
    target: ClassVar[str] = "url"

    def __post_init__(self) -> None:
        if isinstance(self.url, tuple):
            self.url = list(self.url)
        super().__post_init__()
        if self.max_concurrency < 1:
            raise ValueError(f"reward.max_concurrency ({self.max_concurrency}) must be at least 1")
        if not 0 <= self.replica_cooloff_s <= 60:
            raise ValueError(f"reward.replica_cooloff_s ({self.replica_cooloff_s}) must be in [0, 60]")

    @staticmethod
    def _valid_target(where: Any) -> bool:
        try:
            return bool(server_urls(where))
        except ValueError:
            return False

    def build(
        self,
        image_columns: tuple[str, ...] = ("images", "image"),
        *,
        min_pixels: int | None = None,
        max_pixels: int | None = None,
        asynchronous: bool = True,
        name: str = "judge",
    ) -> GroupedJudgeReward:
        """The reward function: the async variant for TRL's trainer (it awaits it on its loop), else the sync one."""
        from judge.reward.trl.http import AsyncHttpJudgeReward, HttpJudgeReward

        cls = AsyncHttpJudgeReward if asynchronous else HttpJudgeReward
        return cls(
            self.url,
            api_key=server_api_key(self.api_key_env),
            max_concurrency=self.max_concurrency,
            send_image_paths=self.send_image_paths,
            min_pixels=min_pixels,  # images go to the judge at the size the policy sees them
            max_pixels=max_pixels,
            replica_cooloff_s=self.replica_cooloff_s,
            **self._options(image_columns, name),
        )


@dataclass(kw_only=True)
class InProcessRewardSpec(_RewardOptions):
    """A judge loaded in every training process (its memory and time are the training's)."""

    model: str = setting(help="Judge model: a folder / hub id / LoRA adapter folder, or an OpenAI /v1 URL.")
    backend: str | None = setting(None, "Engine: hf, openai or vllm (default: openai for URLs, else hf).")
    device: str | None = setting(None, "An hf judge's device (default: this process's training device).")
    config_file: str | None = setting(
        None, "YAML of JudgeConfig fields (the prompt wording the judge was trained on, …)."
    )
    judge: dict[str, Any] = setting(
        help="JudgeConfig fields over config_file, e.g. {orders: 2, max_new_tokens: 512, batch_size: 8}.", factory=dict
    )

    transport: ClassVar[str] = "in_process"
    target: ClassVar[str] = "model"

    def __post_init__(self) -> None:
        super().__post_init__()
        from judge.judging import JudgeConfig

        self.judge = dict(self.judge or {})  # `judge:` left empty in YAML is None
        fields = [f.name for f in dataclasses.fields(JudgeConfig)]
        check_keys(self.judge, fields, "reward.judge (JudgeConfig)")  # a typo fails now, not at the first step

    def judge_config(self) -> Any:
        """The judge's `JudgeConfig`: `config_file`'s fields, then `judge`'s."""
        from judge.config import config_from_yaml
        from judge.judging import JudgeConfig

        return config_from_yaml(JudgeConfig, self.config_file, dict(self.judge))

    def resolved_backend(self) -> str:
        return self.backend or ("openai" if self.model.startswith(("http://", "https://")) else "hf")

    def build(
        self, image_columns: tuple[str, ...] = ("images", "image"), *, device: str = "cpu", name: str = "judge"
    ) -> GroupedJudgeReward:
        """The reward function; an hf judge goes on `device` (the training device) unless `device` is set here."""
        from judge.reward.trl.local import InProcessJudgeReward

        backend = self.resolved_backend()
        return InProcessJudgeReward(
            self.model,
            judge_config=self.judge_config(),
            backend=backend,
            backend_kwargs={"device": self.device or device} if backend == "hf" else {},
            **self._options(image_columns, name),
        )


RewardSpec = HttpRewardSpec | InProcessRewardSpec
TRANSPORTS = {"http": HttpRewardSpec, "in_process": InProcessRewardSpec}


def reward_spec(values: Any) -> RewardSpec:
    """The spec for a `reward:` mapping (or a spec, returned as it is).

    >>> reward_spec({"url": "http://judge:8000", "retry": {"max_retries": 4}}).retry.max_retries
    4
    >>> reward_spec({"transport": "http", "urll": "http://judge:8000"})
    Traceback (most recent call last):
    ValueError: unknown reward (transport http) key(s) ['urll']; valid keys: transport, mode, ...
    """
    if isinstance(values, (HttpRewardSpec, InProcessRewardSpec)):
        return values
    if not isinstance(values, dict) or not values:
        raise ValueError(
            "set reward={transport: http, url: http://…} (a `mrjudge serve` server) or "
            f"reward={{transport: in_process, model: …}} (a judge in each training process); got {values!r}"
        )
    values = dict(values)
    transport = values.pop("transport", None)
    if transport is None:  # unambiguous without it: a server's url, or a model to load
        has_url, has_model = values.get("url") is not None, values.get("model") is not None
        transport = "http" if has_url and not has_model else "in_process" if has_model and not has_url else None
    if transport not in TRANSPORTS:
        raise ValueError(
            f"reward.transport must be one of {', '.join(TRANSPORTS)} (http: reward.url; in_process: reward.model), "
            f"got {transport!r}"
        )
    return TRANSPORTS[transport].from_dict(values)

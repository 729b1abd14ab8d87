"""The reward server's wire contract: a pydantic model for every request and response body (what `/docs` and
`/openapi.json` show), each field with its description.

Limits are `ServerConfig` fields, given to pydantic as the validation context, so one model serves every
configuration (the field types are `reward_server.fields`'). Unknown fields are refused with a suggestion,
a value over a limit is a 413 naming the limit, any other bad value a 422 naming its field
(`errors.from_validation`). Images are checked here as strings only: their headers are read against the
request's pixel budget by `to_items` / `to_request`.

    body = RewardRequestBody.model_validate(json_object, context=config)
    request = body.to_request(config)           # judge.reward.scoring.RewardRequest, images header-read
"""

from __future__ import annotations

import difflib
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, model_validator

from judge.reward.planner import group_id
from judge.reward.scoring import Mode, RewardRequest
from judge.types import DataError, MCItem, Verdict
from reward_server.config import ServerConfig
from reward_server.errors import as_pydantic, invalid, type_name
from reward_server.fields import (
    ITEM_COUNT,
    NONE_IF_EMPTY,
    NONE_IF_FALSY,
    AdapterName,
    Candidates,
    Images,
    ItemId,
    ScalarId,
    Text,
    WireImage,
    array,
)
from reward_server.wire_images import ImageBudget

__all__ = [
    "AdaptersResponse",
    "GetRewardRequest",
    "GetRewardResponse",
    "HealthResponse",
    "JudgeItem",
    "JudgeRequest",
    "JudgeResponse",
    "RewardRequestBody",
    "RewardResponse",
    "Timing",
]

Tournament = Literal["round_robin", "knockout"]


class WireModel(BaseModel):
    """A request body: JSON types as they are (no coercion), unknown fields refused with a suggestion."""

    model_config = ConfigDict(strict=True, extra="forbid", use_attribute_docstrings=True)
    takes: ClassVar[str] = "this endpoint"
    """Who takes these fields, in the unknown-field message."""

    @model_validator(mode="before")
    @classmethod
    def _known_fields_only(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            raise as_pydantic(invalid("", f"expected {cls.takes} object, got {type_name(data)}"))
        known = tuple(cls.model_fields)
        for name in data:
            if name not in known:
                close = difflib.get_close_matches(name, known, n=1) if len(name) <= 64 else []
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise as_pydantic(invalid("", f"unknown field{hint}; {cls.takes} takes {', '.join(known)}"), name)
        return data


# -- requests ---------------------------------------------------------------------------------------------


class JudgeItem(WireModel):
    """One multiple-choice question for the judge (the MC item contract of `judge.types.MCItem`)."""

    takes: ClassVar[str] = "an MC item"

    id: ItemId
    """The item's id (a non-empty string or an integer); its verdict carries it back."""
    question: Text
    """The question the candidates answer."""
    candidates: Candidates
    """2 to `max_candidates` (8) candidate answers, in your order; the verdict's `choice` indexes this list."""
    image: Images = None
    """The image the question is about (a data URL or base64; a path only under `--allow-local-images`), an
    array of up to `max_images` (8) of them, or null for a text-only item."""
    label: int | None = None
    """Index of the best candidate when known, else null; the judge does not see it."""
    meta: Annotated[dict[str, Any] | None, NONE_IF_FALSY] = None
    """Free-form extras, kept with the item."""

    @model_validator(mode="after")
    def _label_indexes_a_candidate(self) -> JudgeItem:
        if self.label is not None and not 0 <= self.label < len(self.candidates):
            message = f"expected null or an index in [0, {len(self.candidates) - 1}], got {self.label}"
            raise as_pydantic(invalid("label", message))
        return self

    def to_item(self, budget: ImageBudget, where: str) -> MCItem:
        """The library's `MCItem`, its images header-read against the request's `budget`."""
        if isinstance(self.image, list):
            image: Any = budget.images(self.image, f"{where}.image") or None
        else:
            image = None if self.image is None else budget.image(self.image, f"{where}.image")
        return MCItem(self.id, self.question, list(self.candidates), image, self.label, dict(self.meta or {}))


class JudgeRequest(WireModel):
    """`POST /v1/judge`: MC items judged as they are, position bias cancelled over display orders."""

    items: Annotated[list[JudgeItem], ITEM_COUNT]
    """1 to `max_items` (512) MC items, and at most `max_request_items` (2048)."""
    model: AdapterName = None
    """A LoRA revision of the judge to answer with (`judge@prod`, `judge@<revision>`; servers with an adapter
    store only); null: the base model."""

    def to_items(self, config: ServerConfig) -> list[MCItem]:
        budget = ImageBudget(config)
        return [item.to_item(budget, f"items[{i}]") for i, item in enumerate(self.items)]


class RewardRequestBody(WireModel):
    """`POST /v1/reward`: G responses to one prompt, scored against each other or against a reference."""

    prompt: Text
    """The prompt the responses answer."""
    images: Annotated[list[WireImage], array("images", "max_images", low=0)] | None = None
    """Up to `max_images` (8) images the prompt is about: data URLs or base64 (paths only under
    `--allow-local-images`)."""
    responses: Annotated[list[Text], array("responses", "max_responses")]
    """1 to `max_responses` (64) responses to score."""
    reference: Annotated[Text | None, NONE_IF_EMPTY] = None
    """A reference answer: pairwise mode compares each response with it. An empty string is no reference."""
    mode: Mode | None = None
    """How to judge: `listwise` (all responses as one MC question), `pairwise` (each against the reference)
    or `tournament`. Null: listwise for 2 to `max_candidates` responses, a tournament above, pairwise for one
    response with a reference."""
    tournament: Annotated[Tournament | None, NONE_IF_FALSY] = None
    """The tournament format: `round_robin` (the default; G(G-1)/2 games) or `knockout` (G-1 games)."""
    id: ScalarId = ""
    """Your id for the group; seeds display orders and the bracket. Absent: derived from the prompt, the
    reference and the number of images, as every reward path derives it."""
    model: AdapterName = None
    """A LoRA revision of the judge to answer with (`judge@prod`, `judge@<revision>`); null: the base model."""

    def to_request(self, config: ServerConfig) -> RewardRequest:
        """The reward planner's request, its images header-read against the request's pixel budget."""
        mode = self.mode
        if mode is None:
            mode = "pairwise" if len(self.responses) == 1 and self.reference is not None else "listwise"
            if len(self.responses) > config.max_candidates:
                mode = "tournament"
        images = ImageBudget(config).images(self.images, "images")
        given_id = str(self.id) if "id" in self.model_fields_set else None
        request = RewardRequest(
            prompt=self.prompt,
            responses=list(self.responses),
            images=images,
            reference=self.reference,
            mode=mode,
            tournament=self.tournament or "round_robin",
            id=given_id if given_id is not None else group_id(self.prompt, self.reference, len(images)),
        )
        try:
            request.validate(config.max_candidates)
        except DataError as exc:
            raise invalid(exc.field_name, f"{exc.problem} — {exc.fix}") from None
        return request


class GetRewardRequest(WireModel):
    """`POST /get_reward`: OpenRLHF's remote reward protocol (one sample per request is how OpenRLHF sends it;
    the server groups samples of the same prompt, `--group-size`)."""

    query: Annotated[list[str], array("queries", "max_items")]
    """1 to `max_items` (512) rollouts, each its prompt followed by the response (image placeholders may be
    expanded to pad tokens)."""
    prompts: list[Text]
    """The prompt of each query, one per query."""
    labels: list[Any] | None = None
    """Null, or one label per query: empty (no reference), a reference answer, or a JSON judge label
    `{"reference": ..., "images": [...]}`."""
    images: list[Images] | None = None
    """Null, or per query an image, an array of images or null (after the label's images)."""
    tournament: Annotated[Tournament | None, NONE_IF_FALSY] = None
    """How groups larger than `max_candidates` are judged: `knockout` (the default) or `round_robin`."""
    model: AdapterName = None
    """A LoRA revision of the judge to answer with (`judge@prod`, `judge@<revision>`); null: the base model."""
    group_size: int | None = None
    """Null, or 1 to `max_items`: hold these samples until this many with the same prompt, images and label have
    arrived (or `group_wait_s` has passed) and judge them together, instead of the server's `--group-size`.
    The verl file sends its `group_size` reward kwarg (verl's rollout.n) here."""

    @model_validator(mode="after")
    def _one_per_query(self) -> GetRewardRequest:
        n = len(self.query)
        if self.group_size is not None and self.group_size < 1:
            raise as_pydantic(invalid("group_size", f"expected null or a positive integer, got {self.group_size}"))
        if len(self.prompts) != n:
            raise as_pydantic(invalid("prompts", f"expected an array of {n} strings, one per query"))
        if self.labels is not None and len(self.labels) != n:
            raise as_pydantic(invalid("labels", f"expected null or an array of {n} labels, one per query"))
        if self.images is not None and len(self.images) != n:
            raise as_pydantic(invalid("images", f"expected null or an array of {n} image lists, one per query"))
        return self


# -- responses ----------------------------------------------------------------------------------------------


class _Response(BaseModel):
    model_config = ConfigDict(use_attribute_docstrings=True)


class Timing(_Response):
    """Where a request's time went, in milliseconds."""

    adapter_load_ms: float | None = None
    """Waiting for a cold adapter to load before queueing."""
    queue_ms: float | None = None
    """Waiting in the batch queue."""
    judge_ms: float | None = None
    """The batch's judge time."""
    total_ms: float
    """From the request's arrival to its answer."""
    batch_requests: int | None = None
    """Requests merged into the batch that judged this one."""
    batch_items: int | None = None
    """MC items in that batch."""


class JudgeResponse(_Response):
    """The verdicts of `POST /v1/judge`, in the items' order."""

    verdicts: list[Verdict]
    """One verdict per item."""
    model: str
    """The adapter revision that answered, or `base`."""
    timing: Timing
    """Where the time went."""


class RewardResponse(_Response):
    """The rewards of `POST /v1/reward`."""

    rewards: list[float | None]
    """One reward in [0, 1] per response, in order; null for a response whose verdict did not parse (counted in
    `/metrics`, never a uniform share)."""
    verdicts: list[Verdict]
    """The verdicts the rewards were read from."""
    mode: Mode
    """The mode the responses were judged in (the one asked for, or the one chosen)."""
    model: str
    """The adapter revision that answered, or `base`."""
    timing: Timing
    """Where the time went."""


class ExtraLogs(_Response):
    """Per-sample figures OpenRLHF logs."""

    judge_scored: list[float]
    """1 for a judged sample, 0 for an unscored one (it got its group's neutral reward)."""
    judge_group_size: list[float]
    """The size of the group each sample was judged in."""


class GetRewardResponse(_Response):
    """OpenRLHF's answer to `POST /get_reward`."""

    rewards: list[float]
    """One reward per query; an unscored sample gets its group's neutral value."""
    scores: list[float]
    """The same values (OpenRLHF reads either)."""
    extra_logs: ExtraLogs
    """Per-sample figures for OpenRLHF's logs."""
    notes: list[str]
    """Why samples went unscored, and what to change."""
    timing: Timing
    """Where the time went."""
    model: str
    """The adapter revision that answered, or `base`."""


class HealthResponse(_Response):
    """`GET /health` (never needs the API key): 200 `ok`, or 503 `degraded` while the judge is stuck."""

    status: Literal["ok", "degraded"]
    """`degraded` while one batch has run longer than `request_timeout_s`."""
    backend: str
    """The judge's backend."""
    queue_depth: int
    """Requests waiting for the judge."""
    batch_running_s: float
    """How long the running batch has run (0 when idle)."""
    max_batch_items: int
    """MC items per judge batch."""
    max_candidates: int
    """Candidates per MC item, and the judge's option limit."""
    reason: str | None = None
    """Why the server is degraded (only then)."""


class ResidentAdapter(_Response):
    """An adapter loaded over the base."""

    name: str
    """Its revision reference."""
    step: int | None
    """The training step it was saved at."""
    pins: int
    """Requests in flight on it."""


class AdaptersResponse(_Response):
    """`GET /v1/adapters`: the adapter store behind the server, and what is loaded."""

    store: str | None
    """The adapter store folder; null when the server serves the base model only (nothing else is given)."""
    base_fingerprint: str | None = None
    """Fingerprint of the served base; adapters trained over another base are refused."""
    capacity: int | None = None
    """Adapters kept loaded (`max_adapters`)."""
    resident: list[ResidentAdapter]
    """Loaded adapters, least recently used first."""
    loads: int | None = None
    """Adapter loads since the start."""
    evictions: int | None = None
    """Adapters unloaded to make room."""
    load_failures: int | None = None
    """Loads that failed."""
    resident_count: int | None = None
    """Adapters loaded."""
    loading_count: int | None = None
    """Adapters the background loader is reading."""
    staged_count: int | None = None
    """Adapters read, waiting for their install between batches."""

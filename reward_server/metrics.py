"""The reward server's Prometheus metrics, kept and written by `prometheus_client` in a registry of its own.

Updated from the event loop and the judge thread (prometheus_client's metrics are thread-safe); `GET
/metrics` returns `Metrics.render()`, the text format 0.0.4:

    mrjudge_requests_total{endpoint="/v1/reward",status="200"} 12.0
    mrjudge_batch_items_bucket{le="8.0"} 3.0
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["CONTENT_TYPE", "Metrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
LOAD_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
ADAPTER_STATES = ("resident", "loading", "staged")
AUDIT_GAUGES = {
    "groups": "Judged reward groups the audit has seen (each a candidate for its seeded draw).",
    "audited": "Groups the auditor has scored.",
    "dropped": "Groups drawn for the audit but dropped: the auditor's queue was full (figures lost, never time).",
    "auditor_errors": "Groups the auditor failed on (counted and logged once per window; the reward went on).",
    "completions": "Audited completions.",
    "no_gold": "Audited completions the auditor had no gold for (no reference).",
    "alarm": "1 once the audit's guard has fired (gold falling while the judge's reward rises, or overpay rising).",
    "agreement": "Last closed window: share of audited completions where the judge's pay and the gold agree.",
    "overpay": "Last closed window: share of completions the gold calls wrong that the judge paid above an even share.",
    "underpay": "Last closed window: share of completions the gold calls right that the judge paid under half an "
    "even share.",
    "judge_mean": "Last closed window: the judge's mean reward over the audited completions.",
    "gold_mean": "Last closed window: the mean gold of the audited completions.",
    "judge_mean_trend": "Slope of the judge's mean reward over the last trend_windows closed windows.",
    "gold_mean_trend": "Slope of the mean gold over the last trend_windows closed windows.",
}
"""`mrjudge_audit_<name>`: the reward audit's figures (`RewardAudit.metrics`), read when rendering. A window's
figures appear once a window has closed (and had completions to measure)."""


class Metrics:
    """One server's metrics. The queue depth, the adapter counts and the reward audit's figures are read live
    when rendering, from the callables given to `watch_queue`, `watch_adapters` and `watch_audit` (the adapter
    and audit metrics exist only after the latter two)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        on = {"registry": self.registry}
        self._requests = Counter(
            "mrjudge_requests_total", "HTTP requests by endpoint and status.", ["endpoint", "status"], **on
        )
        self._errors = Counter("mrjudge_errors_total", "Refused or failed requests by kind.", ["kind"], **on)
        self._refused = Counter(
            "mrjudge_refused_requests_total",
            "Requests answered with a refusal envelope, by status and reason (the envelope's type); the log "
            "summarises them at most once per log_interval_s per reason.",
            ["status", "reason"],
            **on,
        )
        self._cancelled = Counter(
            "mrjudge_cancelled_requests_total", "Requests whose work was given up, by reason.", ["reason"], **on
        )
        self._stopped = Counter(
            "mrjudge_stopped_batches_total", "Judge batches stopped early: nobody waited for them.", **on
        )
        self._judgments = Counter("mrjudge_judgments_total", "MC items judged.", **on)
        self._rewards = Counter(
            "mrjudge_rewards_total",
            "Rewards returned, by endpoint and outcome (scored, or the reason it was not: no_reference, unparsed).",
            ["endpoint", "outcome"],
            **on,
        )
        self._reward_images = Counter(
            "mrjudge_reward_images_total", "Images carried to the judge by judged reward samples.", **on
        )
        self._queue_depth = Gauge("mrjudge_queue_depth", "Requests waiting for the judge.", **on)
        self._batch_items = Histogram("mrjudge_batch_items", "MC items per judge batch.", buckets=BATCH_BUCKETS, **on)
        self._batch_requests = Histogram(
            "mrjudge_batch_requests", "Requests merged into one judge batch.", buckets=BATCH_BUCKETS, **on
        )
        self._latency = Histogram(
            "mrjudge_request_latency_seconds",
            "Time from request to response, by endpoint.",
            ["endpoint"],
            buckets=LATENCY_BUCKETS,
            **on,
        )
        self._queue_wait = Histogram(
            "mrjudge_queue_wait_seconds",
            "Time a request waited before the judge ran it, by cause: adapter_load (its adapter was cold) or "
            "batch (the batch queue).",
            ["cause"],
            buckets=LOAD_BUCKETS,
            **on,
        )
        # Adapters (a server with an adapter store), registered by `watch_adapters`.
        self._adapters = Gauge(
            "mrjudge_adapters",
            "Adapters by state: resident (loaded over the base), loading (the background loader has them), "
            "staged (loaded, awaiting their install between batches).",
            ["state"],
            registry=None,
        )
        self._load_waiting = Gauge(
            "mrjudge_adapter_load_waiting", "Requests waiting for their adapter to load.", registry=None
        )
        self._adapter_requests = Counter(
            "mrjudge_adapter_requests_total",
            "Requests naming an adapter, by its state on arrival (resident or cold).",
            ["state"],
            registry=None,
        )
        self._adapter_load = Histogram(
            "mrjudge_adapter_load_seconds",
            "Time the background loader took per cold adapter.",
            buckets=LOAD_BUCKETS,
            registry=None,
        )
        # The reward audit (a server with one), registered by `watch_audit`; its figures are `_AuditCollector`'s.
        self._audit_submit_errors = Counter(
            "mrjudge_audit_submit_errors",
            "Judged groups the server failed to hand to the audit (logged once; the reward was answered).",
            registry=None,
        )

    def watch_audit(self, figures: Callable[[str], dict[str, float]]) -> None:
        """Expose the reward audit, `mrjudge_audit_<name>` read from `figures("audit")` (`RewardAudit.metrics`)
        when rendering, and the server's own count of groups it could not hand to it."""
        self.registry.register(_AuditCollector(figures))
        self.registry.register(self._audit_submit_errors)

    def audit_submit_failed(self) -> None:
        self._audit_submit_errors.inc()

    def watch_queue(self, depth: Callable[[], int]) -> None:
        self._queue_depth.set_function(depth)

    def watch_adapters(self, counts: Callable[[], dict[str, int]]) -> None:
        """Expose the adapter metrics, `mrjudge_adapters{state}` read from `counts()` when rendering."""
        for state in ADAPTER_STATES:
            self._adapters.labels(state).set_function(lambda state=state: counts().get(state, 0))
        for metric in (self._adapters, self._load_waiting, self._adapter_requests, self._adapter_load):
            self.registry.register(metric)

    def adapter_request(self, state: str) -> None:
        """A request naming an adapter that was `resident` (or staged) on arrival, or `cold`."""
        self._adapter_requests.labels(state).inc()

    def adapter_loaded(self, seconds: float) -> None:
        self._adapter_load.observe(seconds)

    def waited(self, cause: str, seconds: float) -> None:
        """Time a request spent queued, by cause: `adapter_load` (its adapter was cold) or `batch`."""
        self._queue_wait.labels(cause).observe(seconds)

    def load_wait(self, delta: int) -> None:
        self._load_waiting.inc(delta)

    def request(self, endpoint: str, status: int, seconds: float) -> None:
        self._requests.labels(endpoint, str(status)).inc()
        self._latency.labels(endpoint).observe(seconds)

    def error(self, kind: str) -> None:
        self._errors.labels(kind).inc()

    def refused(self, status: int, reason: str) -> None:
        """A request answered with a refusal: `reason` is the envelope's type, a label from the server's code."""
        self._refused.labels(str(status), reason).inc()

    def cancelled(self, reason: str) -> None:
        """A request whose work was given up: `timeout`, `disconnect` (the client left) or `shutdown`."""
        self._cancelled.labels(reason).inc()

    def batch_stopped(self) -> None:
        self._stopped.inc()

    def rewards(self, endpoint: str, reasons: Sequence[str], images: int = 0) -> None:
        """Count returned rewards by outcome: "" is scored, else the reason it was not ("no_reference",
        "unparsed"); `images` is how many images the judged samples carried to the judge."""
        for reason in reasons:
            self._rewards.labels(endpoint, reason or "scored").inc()
        self._reward_images.inc(images)

    def batch(self, n_requests: int, n_items: int) -> None:
        self._batch_requests.observe(n_requests)
        self._batch_items.observe(n_items)
        self._judgments.inc(n_items)

    def render(self) -> str:
        """The exposition text (format 0.0.4)."""
        return generate_latest(_WithoutCreated(self.registry)).decode()


class _AuditCollector(Collector):
    """The audit's figures as gauges, one read of `figures` per render (one consistent snapshot); a figure the
    audit does not have yet (no closed window) is left out rather than shown as 0."""

    def __init__(self, figures: Callable[[str], dict[str, float]]) -> None:
        self.figures = figures

    def describe(self) -> Iterator[Metric]:
        for name, text in AUDIT_GAUGES.items():
            yield GaugeMetricFamily(f"mrjudge_audit_{name}", text)

    def collect(self) -> Iterator[Metric]:
        values = self.figures("audit")
        for name, text in AUDIT_GAUGES.items():
            value = values.get(f"audit/{name}")
            if value is not None:
                yield GaugeMetricFamily(f"mrjudge_audit_{name}", text, value=value)


class _WithoutCreated(Collector):
    """A registry's metrics without the `*_created` timestamps prometheus_client adds to counters and
    histograms: they would be series of their own, which the server has never exposed."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Metric]:
        for family in self.registry.collect():
            family.samples = [s for s in family.samples if not s.name.endswith("_created")]
            yield family

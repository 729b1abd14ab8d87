"""Prometheus text-format metrics, written by hand so the server needs no extra dependency.

Counters, one gauge and histograms; updated from the event loop and the judge thread, hence the lock.
`GET /metrics` returns `Metrics.render()`:

    mrjudge_requests_total{endpoint="/v1/reward",status="200"} 12
    mrjudge_batch_items_bucket{le="8"} 3
"""

from __future__ import annotations

import bisect
import threading
from collections import defaultdict
from collections.abc import Callable, Sequence

__all__ = ["Histogram", "Metrics"]

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
LOAD_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(pairs: Sequence[tuple[str, str]]) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in pairs) + "}" if pairs else ""


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


class Histogram:
    """Cumulative buckets, a sum and a count, as Prometheus histograms are exposed."""

    def __init__(self, buckets: Sequence[float]) -> None:
        self.buckets = tuple(buckets)
        self.counts = [0] * (len(self.buckets) + 1)  # the last one is +Inf
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sum += value
        self.count += 1

    def lines(self, name: str, labels: Sequence[tuple[str, str]] = ()) -> list[str]:
        out, running = [], 0
        for bound, n in zip([*self.buckets, float("inf")], self.counts):
            running += n
            le = "+Inf" if bound == float("inf") else _num(bound)
            out.append(f"{name}_bucket{_labels([*labels, ('le', le)])} {running}")
        out.append(f"{name}_sum{_labels(labels)} {_num(self.sum)}")
        out.append(f"{name}_count{_labels(labels)} {self.count}")
        return out


class Metrics:
    """The reward server's counters; `queue_depth` is read live from the batcher when rendering."""

    def __init__(self, queue_depth: Callable[[], int] | None = None) -> None:
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, str], int] = defaultdict(int)
        self.errors: dict[str, int] = defaultdict(int)
        self.judgments = 0
        self.cancelled_requests: dict[str, int] = defaultdict(int)
        self.stopped_batches = 0
        self.reward_outcomes: dict[tuple[str, str], int] = defaultdict(int)
        self.reward_images = 0
        self.batch_items = Histogram(BATCH_BUCKETS)
        self.batch_requests = Histogram(BATCH_BUCKETS)
        self.latency: dict[str, Histogram] = {}
        self.queue_depth = queue_depth or (lambda: 0)
        # Adapters (a server with an adapter store): where requests' waiting time went, and the loads.
        self.adapter_counts: Callable[[], dict[str, int]] | None = None
        self.adapter_requests: dict[str, int] = defaultdict(int)
        self.adapter_load = Histogram(LOAD_BUCKETS)
        self.queue_wait: dict[str, Histogram] = {}
        self.load_waiting = 0

    def adapter_request(self, state: str) -> None:
        """A request naming an adapter that was `resident` (or staged) on arrival, or `cold`."""
        with self._lock:
            self.adapter_requests[state] += 1

    def adapter_loaded(self, seconds: float) -> None:
        with self._lock:
            self.adapter_load.observe(seconds)

    def waited(self, cause: str, seconds: float) -> None:
        """Time a request spent queued, by cause: `adapter_load` (its adapter was cold) or `batch`."""
        with self._lock:
            self.queue_wait.setdefault(cause, Histogram(LOAD_BUCKETS)).observe(seconds)

    def load_wait(self, delta: int) -> None:
        with self._lock:
            self.load_waiting += delta

    def request(self, endpoint: str, status: int, seconds: float) -> None:
        with self._lock:
            self.requests[(endpoint, str(status))] += 1
            self.latency.setdefault(endpoint, Histogram(LATENCY_BUCKETS)).observe(seconds)

    def error(self, kind: str) -> None:
        with self._lock:
            self.errors[kind] += 1

    def cancelled(self, reason: str) -> None:
        """A request whose work was given up: `timeout`, `disconnect` (the client left) or `shutdown`."""
        with self._lock:
            self.cancelled_requests[reason] += 1

    def batch_stopped(self) -> None:
        with self._lock:
            self.stopped_batches += 1

    def rewards(self, endpoint: str, reasons: Sequence[str], images: int = 0) -> None:
        """Count returned rewards by outcome: "" is scored, else the reason it was not ("no_reference",
        "unparsed"); `images` is how many images the judged samples carried to the judge."""
        with self._lock:
            for reason in reasons:
                self.reward_outcomes[(endpoint, reason or "scored")] += 1
            self.reward_images += images

    def batch(self, n_requests: int, n_items: int) -> None:
        with self._lock:
            self.batch_requests.observe(n_requests)
            self.batch_items.observe(n_items)
            self.judgments += n_items

    def render(self) -> str:
        """The exposition text (format 0.0.4)."""
        with self._lock:
            out = [
                "# HELP mrjudge_requests_total HTTP requests by endpoint and status.",
                "# TYPE mrjudge_requests_total counter",
            ]
            for (endpoint, status), n in sorted(self.requests.items()):
                out.append(f"mrjudge_requests_total{_labels([('endpoint', endpoint), ('status', status)])} {n}")
            out += [
                "# HELP mrjudge_errors_total Refused or failed requests by kind.",
                "# TYPE mrjudge_errors_total counter",
            ]
            for kind, n in sorted(self.errors.items()):
                out.append(f"mrjudge_errors_total{_labels([('kind', kind)])} {n}")
            out += [
                "# HELP mrjudge_cancelled_requests_total Requests whose work was given up, by reason.",
                "# TYPE mrjudge_cancelled_requests_total counter",
            ]
            for reason, n in sorted(self.cancelled_requests.items()):
                out.append(f"mrjudge_cancelled_requests_total{_labels([('reason', reason)])} {n}")
            out += [
                "# HELP mrjudge_stopped_batches_total Judge batches stopped early: nobody waited for them.",
                "# TYPE mrjudge_stopped_batches_total counter",
                f"mrjudge_stopped_batches_total {self.stopped_batches}",
                "# HELP mrjudge_judgments_total MC items judged.",
                "# TYPE mrjudge_judgments_total counter",
                f"mrjudge_judgments_total {self.judgments}",
                "# HELP mrjudge_rewards_total Rewards returned, by endpoint and outcome (scored, or the reason "
                "it was not: no_reference, unparsed).",
                "# TYPE mrjudge_rewards_total counter",
                *(
                    f"mrjudge_rewards_total{_labels([('endpoint', e), ('outcome', o)])} {n}"
                    for (e, o), n in sorted(self.reward_outcomes.items())
                ),
                "# HELP mrjudge_reward_images_total Images carried to the judge by judged reward samples.",
                "# TYPE mrjudge_reward_images_total counter",
                f"mrjudge_reward_images_total {self.reward_images}",
                "# HELP mrjudge_queue_depth Requests waiting for the judge.",
                "# TYPE mrjudge_queue_depth gauge",
                f"mrjudge_queue_depth {self.queue_depth()}",
                "# HELP mrjudge_batch_items MC items per judge batch.",
                "# TYPE mrjudge_batch_items histogram",
                *self.batch_items.lines("mrjudge_batch_items"),
                "# HELP mrjudge_batch_requests Requests merged into one judge batch.",
                "# TYPE mrjudge_batch_requests histogram",
                *self.batch_requests.lines("mrjudge_batch_requests"),
                "# HELP mrjudge_request_latency_seconds Time from request to response, by endpoint.",
                "# TYPE mrjudge_request_latency_seconds histogram",
            ]
            for endpoint, histogram in sorted(self.latency.items()):
                out += histogram.lines("mrjudge_request_latency_seconds", [("endpoint", endpoint)])
            out += [
                "# HELP mrjudge_queue_wait_seconds Time a request waited before the judge ran it, by cause: "
                "adapter_load (its adapter was cold) or batch (the batch queue).",
                "# TYPE mrjudge_queue_wait_seconds histogram",
            ]
            for cause, histogram in sorted(self.queue_wait.items()):
                out += histogram.lines("mrjudge_queue_wait_seconds", [("cause", cause)])
            if self.adapter_counts is not None:
                counts = self.adapter_counts()
                out += [
                    "# HELP mrjudge_adapters Adapters by state: resident (loaded over the base), loading (the "
                    "background loader has them), staged (loaded, awaiting their install between batches).",
                    "# TYPE mrjudge_adapters gauge",
                    *(f"mrjudge_adapters{_labels([('state', k)])} {v}" for k, v in sorted(counts.items())),
                    "# HELP mrjudge_adapter_load_waiting Requests waiting for their adapter to load.",
                    "# TYPE mrjudge_adapter_load_waiting gauge",
                    f"mrjudge_adapter_load_waiting {self.load_waiting}",
                    "# HELP mrjudge_adapter_requests_total Requests naming an adapter, by its state on arrival "
                    "(resident or cold).",
                    "# TYPE mrjudge_adapter_requests_total counter",
                    *(
                        f"mrjudge_adapter_requests_total{_labels([('state', k)])} {v}"
                        for k, v in sorted(self.adapter_requests.items())
                    ),
                    "# HELP mrjudge_adapter_load_seconds Time the background loader took per cold adapter.",
                    "# TYPE mrjudge_adapter_load_seconds histogram",
                    *self.adapter_load.lines("mrjudge_adapter_load_seconds"),
                ]
        return "\n".join(out) + "\n"

"""Counters, gauges and histograms that keep their values without prometheus_client.

Why not prometheus_client's own classes: importing any part of it runs its
package ``__init__``, which imports its exposition half too (``http.server``,
``wsgiref``, ``urllib.request``, the push gateway): 2.8 MiB of an idle worker's
resident memory, 2.1 of them for serving, which a worker without ``http_port``
never does (docs/benchmarks.md, "Idle worker RSS"). These classes hold the
values in plain dicts and produce prometheus_client's own ``Metric`` families
only when something collects them (``/metrics``, a test reading a sample), so
prometheus_client is imported then and not before.

The behaviour is prometheus_client's with ``disable_created_metrics()``, sample
for sample: a counter exports ``<name>_total``, a histogram its cumulative
``_bucket{le}`` series (``+Inf`` added), ``_count`` and ``_sum``, a gauge
``<name>``. No ``_created`` series: each was one more series per label set (50 of
the 119 samples of an operator's scrape) that no rule or panel reads, and
Prometheus's own created-timestamp handling does not need them in the text
format (issue 27, "Metric hygiene"). An unlabelled metric exists at 0 from its
creation, a labelled one per label set from its first ``labels()`` call;
label values are strings (``str()`` of what was passed); a counter refuses a
negative increment. The attribute names (``_name``, ``_type``, ``_labelnames``)
are prometheus_client's too, so the catalogue test reads both alike.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

__all__ = ["Counter", "Family", "Gauge", "Histogram", "Registry"]


class Collector(Protocol):
    def collect(self) -> Iterable[Metric]: ...


class Registry:
    """The metrics of one process, collected as prometheus_client families on demand.

    Duck-types what prometheus_client's exposition needs of a ``CollectorRegistry``
    (``collect()``), so ``generate_latest(REGISTRY)`` and ``start_http_server(...,
    registry=REGISTRY)`` serve it as they would their own.
    """

    def __init__(self) -> None:
        self._collectors: list[Collector] = []
        self._names: set[str] = set()
        self._lock = threading.Lock()

    def register(self, collector: Collector, *, name: str | None = None) -> None:
        with self._lock:
            if name is not None:
                if name in self._names:
                    raise ValueError(f"duplicated metric name: {name}")
                self._names.add(name)
            self._collectors.append(collector)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            collectors = list(self._collectors)
        for collector in collectors:
            yield from collector.collect()

    def get_sample_value(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        """One sample's value, or None (prometheus_client's ``get_sample_value``)."""
        wanted = labels or {}
        for metric in self.collect():
            for sample in metric.samples:
                if sample.name == name and sample.labels == wanted:
                    return float(sample.value)
        return None


class _Value:
    """One series' number, changed under a lock (updates come from many threads)."""

    __slots__ = ("_lock", "_value")

    def __init__(self) -> None:
        self._value = 0.0
        self._lock = threading.Lock()

    def get(self) -> float:
        with self._lock:
            return self._value


class CounterChild(_Value):
    __slots__ = ()

    def inc(self, amount: float = 1) -> None:
        if amount < 0:
            raise ValueError("Counters can only be incremented by non-negative amounts.")
        with self._lock:
            self._value += amount

    def samples(self) -> list[tuple[str, dict[str, str], float]]:
        return [("_total", {}, self.get())]


class GaugeChild(_Value):
    __slots__ = ()

    def inc(self, amount: float = 1) -> None:
        with self._lock:
            self._value += amount

    def dec(self, amount: float = 1) -> None:
        with self._lock:
            self._value -= amount

    def set(self, value: float) -> None:
        with self._lock:
            self._value = float(value)

    def samples(self) -> list[tuple[str, dict[str, str], float]]:
        return [("", {}, self.get())]


class HistogramChild(_Value):
    __slots__ = ("_bounds", "_counts")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        super().__init__()
        self._bounds = bounds
        self._counts = [0.0] * len(bounds)

    def observe(self, amount: float) -> None:
        with self._lock:
            self._value += amount  # the sum
            for index, bound in enumerate(self._bounds):
                if amount <= bound:
                    self._counts[index] += 1
                    break

    def samples(self) -> list[tuple[str, dict[str, str], float]]:
        from prometheus_client.utils import floatToGoString

        with self._lock:
            counts, total = list(self._counts), self._value
        found: list[tuple[str, dict[str, str], float]] = []
        cumulative = 0.0
        for bound, count in zip(self._bounds, counts, strict=True):
            cumulative += count
            found.append(("_bucket", {"le": floatToGoString(bound)},  # type: ignore[no-untyped-call]
                          cumulative))
        found.append(("_count", {}, cumulative))
        found.append(("_sum", {}, total))
        return found


_Child = TypeVar("_Child", CounterChild, GaugeChild, HistogramChild)


class Family(Generic[_Child]):
    """A metric with its label names and one child per label set."""

    _type = ""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = (), *,
                 registry: Registry) -> None:
        self._name = name
        self._documentation = documentation
        self._labelnames = tuple(labelnames)
        self._children: dict[tuple[str, ...], _Child] = {}
        self._lock = threading.Lock()
        if not self._labelnames:
            self._children[()] = self._child()
        registry.register(self, name=name)

    def _child(self) -> _Child:
        raise NotImplementedError

    def labels(self, *values: object, **named: object) -> _Child:
        """The child of one label set, created (at 0) on first use."""
        if values:
            try:
                return self._children[values]  # type: ignore[index]  # the common call: strings
            except (KeyError, TypeError):
                pass
        if not self._labelnames:
            raise ValueError(f"No label names were set when constructing {self._name}")
        if values and named:
            raise ValueError("Can't pass both *args and **kwargs")
        if named:
            if sorted(named) != sorted(self._labelnames):
                raise ValueError("Incorrect label names")
            key = tuple(str(named[label]) for label in self._labelnames)
        else:
            if len(values) != len(self._labelnames):
                raise ValueError("Incorrect label count")
            key = tuple(str(value) for value in values)
        with self._lock:
            child = self._children.get(key)
            if child is None:
                child = self._children[key] = self._child()
            return child

    def remove(self, *values: object) -> None:
        key = tuple(str(value) for value in values)
        with self._lock:
            self._children.pop(key, None)

    def clear(self) -> None:
        """Drop every label set (an unlabelled metric starts again at 0)."""
        with self._lock:
            self._children = {} if self._labelnames else {(): self._child()}

    def collect(self) -> list[Metric]:
        from prometheus_client.metrics_core import Metric

        metric = Metric(self._name, self._documentation, self._type)
        with self._lock:
            children = list(self._children.items())
        for values, child in children:
            series = dict(zip(self._labelnames, values, strict=True))
            for suffix, extra, value in child.samples():
                metric.add_sample(self._name + suffix, {**series, **extra}, value)
        return [metric]

    def _only(self) -> _Child:
        if self._labelnames:
            raise ValueError(f"{self._name} has labels: call labels() first")
        return self._children[()]


class Counter(Family[CounterChild]):
    _type = "counter"

    def _child(self) -> CounterChild:
        return CounterChild()

    def inc(self, amount: float = 1) -> None:
        self._only().inc(amount)


class Gauge(Family[GaugeChild]):
    _type = "gauge"

    def _child(self) -> GaugeChild:
        return GaugeChild()

    def inc(self, amount: float = 1) -> None:
        self._only().inc(amount)

    def dec(self, amount: float = 1) -> None:
        self._only().dec(amount)

    def set(self, value: float) -> None:
        self._only().set(value)


class Histogram(Family[HistogramChild]):
    _type = "histogram"

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = (), *,
                 buckets: Sequence[float], registry: Registry) -> None:
        bounds = tuple(sorted(float(b) for b in buckets))
        if bounds[-1] != float("inf"):
            bounds += (float("inf"),)
        self._bounds = bounds
        super().__init__(name, documentation, labelnames, registry=registry)

    def _child(self) -> HistogramChild:
        return HistogramChild(self._bounds)

    def observe(self, amount: float) -> None:
        self._only().observe(amount)

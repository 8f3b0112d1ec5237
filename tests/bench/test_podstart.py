"""bench.podstart reads the operator's start-latency histogram as Prometheus does.

The bench itself needs a control plane and minutes (docs/benchmarks.md, "Pod start
latency"); its arithmetic is checked here, so a figure it reports means what the
dashboard's ``histogram_quantile`` would show.
"""

from __future__ import annotations

import math

from bench import podstart

TEXT = """\
# TYPE jobwarden_pod_run_start_seconds histogram
jobwarden_pod_run_start_seconds_bucket{kind="ExclusiveJob",le="1.0"} 7.0
jobwarden_pod_run_start_seconds_bucket{kind="JobSchedule",le="1.0"} 2.0
jobwarden_pod_run_start_seconds_bucket{kind="JobSchedule",le="2.0"} 8.0
jobwarden_pod_run_start_seconds_bucket{kind="JobSchedule",le="5.0"} 10.0
jobwarden_pod_run_start_seconds_bucket{kind="JobSchedule",le="+Inf"} 10.0
jobwarden_pod_run_start_seconds_count{kind="JobSchedule"} 10.0
"""


def test_one_series_buckets_are_read_cumulative_and_sorted() -> None:
    buckets = podstart.histogram(TEXT, podstart.METRIC, kind="JobSchedule")
    assert buckets == [(1.0, 2.0), (2.0, 8.0), (5.0, 10.0), (math.inf, 10.0)]


def test_quantiles_interpolate_inside_the_bucket_like_histogram_quantile() -> None:
    buckets = podstart.histogram(TEXT, podstart.METRIC, kind="JobSchedule")
    # rank 5 of 10 lies in (1, 2] holding ranks 3..8: 1 + (5 - 2) / 6.
    assert podstart.histogram_quantile(0.5, buckets) == 1.5
    # rank 9.5 in (2, 5] holding 9..10: 2 + 3 * 1.5 / 2.
    assert podstart.histogram_quantile(0.95, buckets) == 4.25
    assert podstart.histogram_quantile(0.1, buckets) == 0.5  # first bucket from 0
    assert podstart.histogram_quantile(0.5, []) is None


def test_a_rank_in_the_inf_bucket_reads_as_the_highest_finite_bound() -> None:
    buckets = [(1.0, 1.0), (2.0, 2.0), (math.inf, 10.0)]
    assert podstart.histogram_quantile(0.95, buckets) == 2.0


def test_exact_quantiles_are_linear_between_ranks() -> None:
    assert podstart.quantile([3.0, 1.0, 2.0, 4.0], 0.5) == 2.5
    assert podstart.quantile([1.0, 2.0], 0.95) == 1.95

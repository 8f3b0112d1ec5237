"""The benchmark harness keeps working: ``python -m bench --quick`` on one baseline.

Only the peer-independent single-row UPDATE baseline runs here (tiny counts),
so the normal test run needs neither procrastinate nor pgqueuer; the real
numbers come from ``python -m bench`` (see docs/benchmarks.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg

REPO = Path(__file__).resolve().parent.parent.parent


def test_quick_update_baseline_reports_rates_and_leaves_no_database(
    pg_server: str, tmp_path: Path
) -> None:
    prefix = f"bench_smoke_{uuid.uuid4().hex[:8]}_"
    out = tmp_path / "results.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            *["--quick", "--systems", "none", "--measure", "update", "--baseline-seconds", "0.2"],
            *("--dsn", pg_server, "--db-prefix", prefix, "--json", str(out)),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "single-row UPDATE (autocommit)" in proc.stdout
    record = json.loads(out.read_text())
    update = record["baselines"]["update"]
    assert update["1"]["median"] > 0
    assert update["4"]["median"] > 0
    assert record["server"]["fsync"] in ("on", "off")
    assert record["errors"] == []
    with psycopg.connect(pg_server, autocommit=True) as conn:
        left = conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s", (prefix + "%",)
        ).fetchall()
    assert left == []


def test_growth_quick_runs_every_curve_side_by_side_and_a_short_soak(
    pg_server: str, tmp_path: Path
) -> None:
    """``python -m bench.growth --quick``: every point for every loadable system, ratios, soak.

    The peers are optional (the ``bench`` extra); where they are installed, each
    must have its own figures beside Jobwarden's and a ratio in the summary.
    """
    prefix = f"bench_growth_{uuid.uuid4().hex[:8]}_"
    out = tmp_path / "growth.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.growth", "--quick", "--allow-missing",
         "--dsn", pg_server, "--db-prefix", prefix, "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    record = json.loads(out.read_text())
    systems = set(record["systems"])
    assert "jobwarden" in systems
    points = {"40 pending", "40 pending + 100 completed", "40 pending, 2 processes"}
    assert {(r["system"], r["scenario"]) for r in record["runs"]} == {
        (s, p) for s in systems for p in points}
    for run in record["runs"]:
        assert run["drain"]["jobs"] == 40 and run["drain"]["jobs_per_s"] > 0, run
        assert sum(run["drain"]["per_process"]) >= 40
        assert len(run["drain"]["per_process"]) == run["processes"]
        assert run["claim"]["p50_ms"] > 0
        assert run["filled"]["table_bytes"] > 0
        assert run["load_before"] >= 0
    completed = [r for r in record["runs"] if r["completed"] == 100]
    assert all(r["filled"]["tables"] for r in completed)
    for point in points:
        row = record["summary"][point]
        assert set(row) == systems
        assert set(row["jobwarden"]["ratios"]) == systems - {"jobwarden"}
    assert "jw/" in record["table"] or systems == {"jobwarden"}
    assert record["soak"]["samples"] and record["soak"]["samples"][-1]["enqueued"] > 0
    with psycopg.connect(pg_server) as conn:
        left = conn.execute("SELECT count(*) FROM pg_database WHERE datname LIKE %s",
                            (f"{prefix}%",)).fetchone()
    assert left == (0,)


def test_hops_times_every_hop_of_a_few_jobs(dsn: str, tmp_path: Path) -> None:
    """``python -m bench.hops``: the per-hop breakdown of docs/benchmarks.md keeps working."""
    out = tmp_path / "hops.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.hops", "--dsn", dsn, "--jobs", "5", "--warmup", "1",
         "--json", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    for hop in ("enqueue", "to-notify", "to-claim", "claim", "hand-off", "body", "total"):
        assert report[hop]["p50"] == report[hop]["p50"], hop  # a number, not NaN
    assert report["total"]["p50"] > report["claim"]["p50"] > 0
    assert report["worker_cpu_per_job_ms"]["mean"] > 0

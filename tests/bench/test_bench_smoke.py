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


def test_growth_curves_and_a_short_soak_run_end_to_end(pg_server: str, tmp_path: Path) -> None:
    """``python -m bench.growth`` on tiny sizes: every curve and the soak report figures."""
    name = f"bench_growth_{uuid.uuid4().hex[:8]}"
    out = tmp_path / "growth.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.growth", "--dsn", pg_server, "--db-name", name,
         "--drain", "40", "--sizes", "40,80", "--completed", "100", "--processes", "1,2",
         "--reps", "1", "--soak", "2", "--soak-every", "1", "--rate", "20",
         "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    record = json.loads(out.read_text())
    scenarios = {r["scenario"] for r in record["runs"]}
    assert scenarios == {"40 pending", "80 pending", "40 pending + 100 completed",
                         "40 pending, 2 processes"}
    assert all(r["drain"]["jobs"] == 40 and r["drain"]["jobs_per_s"] > 0
               for r in record["runs"])
    assert record["soak"]["samples"] and record["soak"]["samples"][-1]["enqueued"] > 0
    with psycopg.connect(pg_server) as conn:
        left = conn.execute("SELECT count(*) FROM pg_database WHERE datname LIKE %s",
                            (f"{name}%",)).fetchone()
    assert left == (0,)

"""``python -m bench.podstart`` keeps working: two pod runs, measured and reported.

The figures themselves are the bench's (docs/benchmarks.md, "Pod start latency");
here only that it runs against this tier's fixtures and reports what it says it does:
every measured pod's claim, container start and job run in that order, the
operator's histogram counting them, and no database left behind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

pytestmark = [pytest.mark.realkube, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def test_the_pod_start_bench_measures_every_run_it_reports(
        kube_tools_dir: Path, pg_server: str, tmp_path: Path) -> None:
    out = tmp_path / "podstart.json"
    env = {**os.environ, "JOBWARDEN_KUBE_TOOLS_BIN": str(kube_tools_dir)}
    proc = subprocess.run(
        [sys.executable, "-m", "bench.podstart", "--runs", "2", "--interval", "2s",
         "--dsn", pg_server, "--json", str(out)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert "exported histogram" in proc.stdout
    record = json.loads(out.read_text())
    assert record["metric"]["count"] >= 2
    assert record["observed"]["n"] == record["spawned"]["n"] == record["job_ran"]["n"] == 2
    for pod in record["pods"]:
        assert 0 <= pod["spawned"] <= pod["job_ran"], pod
        assert pod["observed"] >= 0
    assert len(record["databases"]) == 2  # the migrated template and the run's copy
    with psycopg.connect(pg_server, autocommit=True) as conn:
        left = conn.execute("SELECT datname FROM pg_database WHERE datname = ANY(%s)",
                            (record["databases"],)).fetchall()
    assert left == []

"""``python -m bench.console`` keeps working (tiny table; the real numbers are in docs)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg

REPO = Path(__file__).resolve().parent.parent.parent


def test_console_bench_fills_serves_times_and_drops_its_database(pg_server: str,
                                                                  tmp_path: Path) -> None:
    name = f"jw_bench_console_{uuid.uuid4().hex[:8]}"
    out = tmp_path / "console.json"
    proc = subprocess.run([sys.executable, "-m", "bench.console", "--dsn", pg_server,
                           "--jobs", "3000", "--requests", "3", "--db", name,
                           "--json", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["jobs"] == 3000 and len(report["loadavg_before"]) == 3
    assert set(report["pages"]) >= {"overview", "jobs status=failed", "job detail"}
    assert all(page["p95_ms"] > 0 for page in report["pages"].values())
    with psycopg.connect(pg_server, autocommit=True) as conn:
        assert conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                            (name,)).fetchone() is None

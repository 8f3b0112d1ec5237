"""Render and lint charts/jobwarden with Helm's own Go engine, offline.

Why two libraries: ``helm-python-sdk`` (import ``helm_python``) binds Helm v4's
Go SDK and can render a chart without a cluster (``helm template``) and lint it
with values; ``helm-sdkpy`` binds the same Go code but has no client-only
render (its install always talks to an API server), so it is only used for
``helm lint`` of the chart's defaults, in a subprocess because two Go runtimes
should not share one Python process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

from tests.support import yamlio

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "jobwarden"
RELEASE = "jw"
NAMESPACE = "jobs"


def scenarios() -> list[str]:
    """ "default" plus the name of every ci/*-values.yaml file."""
    return ["default", *sorted(p.name for p in (CHART / "ci").glob("*-values.yaml"))]


def values_of(scenario: str) -> dict[str, Any] | None:
    if scenario == "default":
        return None
    return dict(yamlio.load((CHART / "ci" / scenario).read_text()) or {})


def lint(values: dict[str, Any] | None) -> dict[str, Any]:
    import helm_python

    return dict(helm_python.lint(str(CHART), values, strict=True, namespace=NAMESPACE))


@cache
def _render(values_json: str) -> dict[str, str]:
    import helm_python

    values = json.loads(values_json)
    with helm_python.Chart.load(str(CHART)) as chart:
        return dict(chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True))


#: A DSN for renders whose values name none (the chart refuses to render without one).
TEST_DSN = "postgresql://jobwarden@postgres:5432/jobwarden"


def with_test_defaults(values: dict[str, Any] | None) -> dict[str, Any]:
    """``values`` plus what an offline render needs: a DSN when none is named, and
    monitors rendered without asking the (absent) cluster whether it serves their API."""
    merged = json.loads(json.dumps(values or {}))
    database = merged.setdefault("database", {})
    if not database.get("dsn") and not database.get("existingSecret"):
        database["dsn"] = TEST_DSN
    merged.setdefault("metrics", {}).setdefault("onlyWhenApiExists", False)
    return dict(merged)


def render(values: dict[str, Any] | None, *, raw: bool = False) -> dict[str, str]:
    """Template path -> rendered text (NOTES.txt included); ``raw``: the values as given,
    without :func:`with_test_defaults`."""
    return _render(json.dumps(values if raw else with_test_defaults(values)))


def manifests(values: dict[str, Any] | None) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path, text in sorted(render(values).items()):
        if path.endswith(".txt"):
            continue
        docs.extend(doc for doc in yamlio.load_all(text) if doc)
    return docs


def sdkpy_lint() -> dict[str, Any]:
    """``helm lint`` of the chart's defaults through helm-sdkpy, in a child process."""
    code = (
        "import asyncio, json, sys, helm_sdkpy\n"
        "config = helm_sdkpy.Configuration(namespace='default')\n"
        "print(json.dumps(asyncio.run(helm_sdkpy.Lint(config).run(sys.argv[1]))))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(CHART)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if proc.returncode != 0:
        raise AssertionError(f"helm-sdkpy lint failed: {proc.stderr[-2000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))

"""The committed Grafana dashboard is exactly what charts/dashboard.py generates.

The dashboard is code (Grafana's typed SDK); a hand edit of the JSON, or a code
change without regenerating, fails here with the command that fixes it.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("grafana_foundation_sdk", reason="pip install -e '.[test]'")

CHARTS = Path(__file__).resolve().parents[2] / "charts"


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dashboard_generator",
                                                  CHARTS / "dashboard.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_dashboard_is_what_the_code_generates():
    module = generator()
    committed = (CHARTS / "jobwarden" / "dashboards" / "jobwarden.json").read_text()
    assert committed == module.render(), "regenerate it: python charts/dashboard.py"


def test_every_panel_has_a_unique_id_and_fits_the_grid():
    board = json.loads(generator().render())
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)) == len(board["panels"]) > 30
    for panel in board["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
    # Every query goes to the dashboard's data source variable.
    for panel in board["panels"]:
        for target in panel.get("targets") or []:
            assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}

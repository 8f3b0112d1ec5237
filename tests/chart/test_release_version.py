"""The chart is released with the code: its version and appVersion are the release's
(``jobwarden.version.VERSION``, docs/upgrades.md "Cutting a release"). The operator's
image tag defaults to appVersion, so a chart of one release deploys that release's
operator -- and the helm upgrade test (tests/cluster/test_helm_upgrade.py) tells the
previous release's chart from HEAD's by it."""

from __future__ import annotations

from pathlib import Path

from jobwarden.version import VERSION
from tests.support import yamlio

CHART = Path(__file__).resolve().parents[2] / "charts" / "jobwarden"


def test_the_chart_version_and_app_version_are_the_release() -> None:
    chart = yamlio.load((CHART / "Chart.yaml").read_text())
    assert (chart["version"], chart["appVersion"]) == (VERSION, VERSION)

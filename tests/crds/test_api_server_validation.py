"""The CRDs pass the Kubernetes API server's own CustomResourceDefinition validation.

The Python checks (crdschema.py) approximate it; this runs the real code
(``k8s.io/apiextensions-apiserver`` ``ValidateCustomResourceDefinition``: the
structural-schema rules, list-map keys that must be required or defaulted,
printer columns, CEL compilation and its cost budget) through the small Go
program in ``apivalidation/``. It is built with the kube tools, before any test
runs (scripts/build-kube-tools, keyed by its sources): a test never compiles, so a
cold Go build cache cannot time a test out. Without a Go toolchain it is skipped
with one line (and in CI that skip is a failure: tests/conftest.py).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from crdschema import ROOT

from tests.cluster.tools import ToolsUnavailable, kube_tools
from tests.support import yamlio

CRDS = sorted((ROOT / "crds").glob("*.yaml"))


@pytest.fixture(scope="module")
def validator() -> Path:
    try:
        return kube_tools() / "apivalidation"
    except ToolsUnavailable as exc:
        pytest.skip(f"API server validation skipped: {exc}")


def test_every_crd_passes_the_api_server_s_validation(validator: Path) -> None:
    result = subprocess.run([str(validator), *map(str, CRDS)], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count(": valid") == len(CRDS)


def test_the_validator_refuses_what_the_api_server_refuses(validator: Path,
                                                           tmp_path: Path) -> None:
    crd = yamlio.load((ROOT / "crds" / "jobwarden.io_jobschedules.yaml").read_text())
    version = crd["spec"]["versions"][0]
    version["additionalPrinterColumns"][0]["type"] = "datetime"  # not a column type
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["x-kubernetes-validations"].append({"rule": "self.nosuchfield == 1",
                                             "message": "x"})
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(crd))
    result = subprocess.run([str(validator), str(bad)], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 1
    assert "additionalPrinterColumns[0].type" in result.stdout
    assert "nosuchfield" in result.stdout

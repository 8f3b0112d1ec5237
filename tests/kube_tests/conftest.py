"""The emulated API's own tests: the fixtures of tests/support/kube, plus test-only CRDs."""

from __future__ import annotations

import pathlib

import pytest

from tests.support.kube.plugin import CRD_DIR

TEST_CRDS = pathlib.Path(__file__).parent / "crds"


@pytest.fixture
def kube_crd_paths() -> list[pathlib.Path]:
    return [TEST_CRDS, *([CRD_DIR] if CRD_DIR.is_dir() else [])]

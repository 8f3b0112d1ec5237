"""The emulated API's own tests: the fixtures of tests/kube, plus test-only CRDs."""

from __future__ import annotations

import pathlib

import pytest

from tests.kube.plugin import CRD_DIR, kube_api, kube_api_factory, kubectl

__all__ = ["kube_api", "kube_api_factory", "kube_crd_paths", "kubectl"]

TEST_CRDS = pathlib.Path(__file__).parent / "crds"


@pytest.fixture
def kube_crd_paths() -> list[pathlib.Path]:
    return [TEST_CRDS, *([CRD_DIR] if CRD_DIR.is_dir() else [])]

"""pytest fixtures for the emulated Kubernetes API, registered as a plugin by tests/conftest.py.

    pytest_plugins = ["tests.support.kube.plugin"]

Each test gets a fresh server (starting one takes a few milliseconds, cheaper
than resetting shared state and safer: no watch of a previous test's operator
can see this test's objects). CRDs come from the repository's ``crds/``
directory; override ``kube_crd_paths`` to add more.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Iterator

import pytest

from .kubectl import Kubectl
from .server import KubeAPI

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
CRD_DIR = REPO_ROOT / "crds"


@pytest.fixture
def kube_crd_paths() -> list[pathlib.Path]:
    """YAML files or directories whose CRDs every emulated cluster starts with."""
    return [CRD_DIR] if CRD_DIR.is_dir() else []


@pytest.fixture
def kube_api_factory(
    tmp_path: pathlib.Path, kube_crd_paths: list[pathlib.Path]
) -> Iterator[Callable[[str], KubeAPI]]:
    """Start more emulated clusters (``factory("east")``); all are stopped after the test."""
    started: list[KubeAPI] = []

    def factory(name: str = "kmock") -> KubeAPI:
        api = KubeAPI(
            workdir=tmp_path / f"kube-{name}", crd_paths=kube_crd_paths, name=name
        ).start()
        started.append(api)
        return api

    yield factory
    for api in reversed(started):
        api.stop()


@pytest.fixture
def kube_api(kube_api_factory: Callable[[str], KubeAPI]) -> KubeAPI:
    """A fresh emulated cluster: ``.url``, ``.kubeconfig``, ``.get/.create/.patch/.wait_for``..."""
    return kube_api_factory("kmock")


@pytest.fixture
def kubectl(kube_api: KubeAPI, tmp_path: pathlib.Path) -> Kubectl:
    """The real kubectl pointed at ``kube_api``: ``kubectl("get", "js")``, ``kubectl.json(...)``."""
    return Kubectl(kube_api.kubeconfig, cache_dir=tmp_path / "kubectl-cache")

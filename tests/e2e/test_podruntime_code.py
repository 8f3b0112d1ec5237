"""The process kubelet's host mode: which code an image reference runs, and the
arguments that name a volume's path (tests/e2e/podruntime.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e import podruntime as rt

OLD = rt.Code(python=Path("/venvs/old/bin/python"), source=Path("/trees/old"))
TOOL = rt.Code(python=Path("/usr/bin/python3"), source=Path("/repo"), path=(Path("/tools"),))


def test_an_image_runs_the_code_mapped_to_its_reference_or_repository_else_the_repos():
    images = rt.Images(code={"jobwarden/jobwarden:0.1.0": OLD, "registry.k8s.io/kubectl": TOOL},
                       failures={"registry.k8s.io/kubectl:v0": "no such tag"})
    assert images.pull("jobwarden/jobwarden:0.1.0").code == OLD
    assert images.pull("jobwarden/jobwarden:0.2.0").code is None  # HEAD's code
    assert images.pull("registry.k8s.io/kubectl:v1.37.2").code == TOOL  # any tag
    with pytest.raises(rt.PullFailure, match="no such tag"):
        images.pull("registry.k8s.io/kubectl:v0")


def test_arguments_under_a_mount_point_to_the_volume_on_the_host():
    mounts = {"/crds": Path("/pods/p/volumes/crds"), "/tmp/": Path("/pods/p/volumes/tmp")}
    args = ["apply", "-f", "/crds", "/crds/a.yaml", "--cache-dir=/tmp/cache", "/crdsx",
            "--field-manager=kubectl", "/etc/hosts"]
    assert rt.host_paths(args, mounts) == [
        "apply", "-f", "/pods/p/volumes/crds", "/pods/p/volumes/crds/a.yaml",
        "--cache-dir=/pods/p/volumes/tmp/cache", "/crdsx", "--field-manager=kubectl",
        "/etc/hosts"]

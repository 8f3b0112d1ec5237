"""The image scripts/build-image builds, and buildah on that script's storage.

Shared by tests/image (the image itself) and the cluster tier's image mode (the
process kubelet running pods in the image's root filesystem).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.e2e import podruntime as rt

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "scripts" / "build-image"
#: build-image's exit code when it cannot build here.
UNAVAILABLE = 3


class ImageUnavailable(RuntimeError):
    """The image cannot be built here (not root, no buildah/debootstrap): skip, saying so."""


def build() -> str:
    """The image's name, built (or found cached) by scripts/build-image."""
    result = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True,
                            check=False, timeout=3600)
    if result.returncode == UNAVAILABLE:
        raise ImageUnavailable(result.stderr.strip().splitlines()[-1])
    if result.returncode != 0:
        raise RuntimeError(f"scripts/build-image failed:\n{result.stderr[-4000:]}")
    return result.stdout.strip().splitlines()[-1]


class Buildah:
    """buildah on build-image's own storage (vfs): its JOBWARDEN_IMAGE_CACHE, else its default."""

    def __init__(self) -> None:
        cache = Path(os.environ.get("JOBWARDEN_IMAGE_CACHE") or Path(
            os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "jobwarden" / "image")
        self.prefix = ["buildah", "--root", str(cache / "storage"), "--runroot",
                       str(cache / "run"), "--storage-driver", "vfs"]

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self.prefix, *args], capture_output=True, text=True,
                              check=check, timeout=300)

    def working_container(self, image: str) -> str:
        return self("from", "--pull-never", "--quiet", image).stdout.strip()

    def root_image(self, container: str) -> rt.Image:
        """The container's root filesystem (mounted) with the image's Env, WorkingDir, USER."""
        root = Path(self("mount", container).stdout.strip())
        config = json.loads(self("inspect", "--type", "container", container).stdout)
        oci = config["OCIv1"]["config"]
        env = tuple(tuple(item.split("=", 1)) for item in oci.get("Env") or [])
        uid, _, gid = str(oci.get("User") or "0:0").partition(":")
        return rt.Image(ref="", user=(int(uid), int(gid or uid)), root=root,
                        env=env,  # type: ignore[arg-type]
                        workdir=oci.get("WorkingDir") or "/")

"""The image, built for real: the repository's Dockerfile, unchanged, by Debian's buildah.

scripts/build-image makes the Dockerfile's base (python:3.11-slim) from Debian
packages, since there is no registry to pull it from, then runs ``buildah bud
--isolation chroot`` with vfs storage (no daemon) -- both cached outside the
repository. Here the result must run what the chart runs, as the Dockerfile's
``USER`` (uid 10001): ``jobwarden --help`` and ``jobwarden worker --help``.

Marked ``image``: scripts/test builds the image in the background while the
parallel phase runs and runs this test afterwards (with the serial phase), so
the build costs no test worker its time. Skipped with one line where the image
cannot be built (not root, no buildah or debootstrap).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator

import pytest

from tests.image import buildah

#: Debian's python3 (3.11) with the wheels of jobwarden[operator]: 379 MB measured. A
#: bound well above it, so a layer that drags in a toolchain or a cache shows.
MAX_SIZE = 600 * 10**6

pytestmark = [pytest.mark.image, pytest.mark.slow]

Box = tuple[buildah.Buildah, str]


@pytest.fixture(scope="module")
def image() -> str:
    try:
        return buildah.build()
    except buildah.ImageUnavailable as exc:
        pytest.skip(f"image not built here: {exc}")
    raise AssertionError("unreachable")


@pytest.fixture(scope="module")
def container(image: str) -> Iterator[Box]:
    # One working container for the module: vfs copies the whole image for each.
    tool = buildah.Buildah()
    name = tool.working_container(image)
    yield tool, name
    tool("rm", name, check=False)


def run(box: Box, *command: str, user: str | None = None
        ) -> subprocess.CompletedProcess[str]:
    tool, name = box
    options = ["--isolation", "chroot", *(["--user", user] if user else [])]
    return tool("run", *options, name, "--", *command, check=False)


def test_the_image_runs_jobwarden_and_its_worker_as_uid_10001(container: Box):
    whoami = run(container, "id", "-u")
    assert whoami.returncode == 0 and whoami.stdout.strip() == "10001", whoami
    for command in (["jobwarden", "--help"], ["jobwarden", "worker", "--help"]):
        result = run(container, *command, user="10001:10001")
        assert result.returncode == 0, result
        assert result.stdout.startswith(f"usage: {' '.join(command[:-1])}"), result.stdout


def test_the_base_has_python_and_pip_where_the_official_image_has_them(
        container: Box):
    where = run(container, "sh", "-c", "command -v python; command -v pip; python -c "
                "'import sys; print(sys.version_info[:2] == (3, 11), sys.prefix)'")
    assert where.stdout.split() == ["/usr/local/bin/python", "/usr/local/bin/pip", "True",
                                    "/usr/local"], where
    # The runtime stage installed from wheels only: the package, no build tools.
    tools = run(container, "sh", "-c", "for t in gcc cc make; do command -v $t; done; true")
    assert tools.stdout.strip() == ""


def test_the_image_size_stays_bounded(image: str, container: Box):
    tool, _ = container
    shown = tool("images", "--format", "{{.Size}}", image).stdout.strip()
    match = re.fullmatch(r"([0-9.]+) (kB|MB|GB)", shown)
    assert match is not None, shown
    size = float(match.group(1)) * {"kB": 10**3, "MB": 10**6, "GB": 10**9}[match.group(2)]
    assert 0 < size < MAX_SIZE, shown

"""The Dockerfile builds the image the chart expects, and its install step
works: the project's wheel installs with the same pip command into a clean
virtual environment and the ``jobwarden`` entry point starts."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest
from helmchart import CHART, ROOT

from tests.support import yamlio

DOCKERFILE = (ROOT / "Dockerfile").read_text()


def instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", DOCKERFILE)
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def test_image_is_multi_stage_with_a_slim_python_base() -> None:
    froms = [rest for word, rest in instructions() if word == "FROM"]
    assert len(froms) >= 2
    assert all("python:${PYTHON_VERSION}-slim" in f for f in froms)
    assert "ARG PYTHON_VERSION=3.11" in DOCKERFILE


def test_runtime_installs_only_wheels_from_the_build_stage() -> None:
    runtime = DOCKERFILE.split("AS runtime", 1)[1]
    assert "--no-index --find-links=/wheels" in runtime
    for tool in ("gcc", "build-essential", "apt-get install"):
        assert tool not in runtime


def test_image_runs_as_the_numeric_user_the_chart_expects() -> None:
    users = [rest for word, rest in instructions() if word == "USER"]
    assert users == ["10001:10001"]
    values = yamlio.load((CHART / "values.yaml").read_text())
    assert values["operator"]["podSecurityContext"]["runAsUser"] == 10001


def test_entrypoint_is_exec_form_jobwarden_and_there_is_no_healthcheck() -> None:
    entry = [rest for word, rest in instructions() if word == "ENTRYPOINT"]
    assert [json.loads(e) for e in entry] == [["jobwarden"]]
    assert all(word != "HEALTHCHECK" for word, _ in instructions())


@pytest.mark.slow
@pytest.mark.timeout(900)  # builds and installs wheels: 260 s on a machine with ~40% steal
def test_the_wheel_installs_like_the_dockerfile_does_and_starts(tmp_path: Path) -> None:
    # The build context the Dockerfile copies, in a scratch directory so that
    # the build leaves nothing (build/, *.egg-info) in the checkout.
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(
        ROOT / "operator", src / "operator", ignore=shutil.ignore_patterns("__pycache__")
    )
    wheels = tmp_path / "wheels"
    isolation = [] if importlib.util.find_spec("wheel") is None else ["--no-build-isolation"]
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            *isolation,
            "--wheel-dir",
            str(wheels),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    env_dir = tmp_path / "venv"
    # The dependencies come from the test interpreter's own site-packages (the
    # project's .venv), appended to the new venv's path by a .pth file; the project
    # itself only from the wheel, which the new venv's site-packages hold first.
    # Not system_site_packages=True: that inherits the *base* interpreter's packages
    # (where .venv was created from), which a fresh machine does not have.
    venv.create(env_dir, system_site_packages=False, with_pip=False)
    python = env_dir / "bin" / "python"
    # The Dockerfile's install command, run by this interpreter's pip into the new
    # venv (--python), before the venv can see .venv's editable jobwarden.
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-index",
         f"--find-links={wheels}", "--force-reinstall", "--no-deps", "jobwarden[operator]"],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    own_site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    inherited = sorted({sysconfig.get_path("purelib"), sysconfig.get_path("platlib")})
    (Path(own_site) / "test-deps.pth").write_text("".join(f"{p}\n" for p in inherited))
    jobwarden = env_dir / "bin" / "jobwarden"
    for args in (["--help"], ["worker", "--help"]):
        proc = subprocess.run(
            [str(jobwarden), *args],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        assert "usage" in proc.stdout.lower()
    location = subprocess.run(
        [str(python), "-c", "import jobwarden; print(jobwarden.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout
    assert str(env_dir) in location, "the venv did not use the freshly built wheel"

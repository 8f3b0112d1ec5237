"""Earlier releases of Jobwarden, built from git history, to run beside HEAD.

The upgrade tests run the previous release's processes against HEAD's schema
(docs/upgrades.md). That release is whatever commit ``releases.toml`` (at the
root of the repository) names for it, so it is built here from git history:
``git archive <commit>`` into a directory, a virtualenv next to it, and ``pip
install`` of that tree with the extras asked for. pip resolves the release's
own dependency ranges, as a user installing it would.

The build is cached outside the repository, keyed by commit (a release's
commit never changes), under ``$JOBWARDEN_RELEASES_CACHE`` or else
``~/.cache/jobwarden/releases/<commit>/``: the source tree in ``source/`` and
one virtualenv per set of extras in ``venv-<extras>/``. A file lock per commit
makes parallel pytest workers (and parallel sessions) build it once; a build
is moved into place only when complete, so an interrupted build is redone,
never used half-made.

API (all that other tests need)::

    from tests.support import releases

    releases.all_releases()          # [Release(version, commit, date)], oldest first
    releases.previous()              # the newest release named (HEAD's N-1)
    built = releases.install("0.1.0", extras=("operator",))
    built.python                     # Path of the venv's python
    built.jobwarden                  # Path of its ``jobwarden`` console script
    built.source                     # the release's tree (charts/, Dockerfile, tests/)
    built.command("worker", "--app", "m")  # [str(jobwarden), "worker", "--app", "m"]

Installing needs the package index pip is configured for (the first time per
commit and extras; later runs reuse the cache and never touch the network).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from collections.abc import Iterator, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RELEASES_FILE = REPO / "releases.toml"

#: How long a build may take (git archive + venv + pip install of every dependency).
BUILD_TIMEOUT = 900.0


@dataclasses.dataclass(frozen=True)
class Release:
    """One released version and the commit it was cut from (releases.toml)."""

    version: str
    commit: str
    date: str


@dataclasses.dataclass(frozen=True)
class Installed:
    """A release installed in a virtualenv of its own."""

    release: Release
    #: The release's tree as ``git archive`` wrote it (its charts, Dockerfile, tests).
    source: Path
    #: The virtualenv's root.
    venv: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def jobwarden(self) -> Path:
        return self.venv / "bin" / "jobwarden"

    def command(self, *args: str) -> list[str]:
        """The release's ``jobwarden`` command line with ``args``."""
        return [str(self.jobwarden), *args]


def all_releases() -> list[Release]:
    """Every release releases.toml names, oldest first."""
    with open(RELEASES_FILE, "rb") as handle:
        data = tomllib.load(handle)
    return [Release(version=str(entry["version"]), commit=str(entry["commit"]),
                    date=str(entry["date"])) for entry in data.get("release", [])]


def release(version: str) -> Release:
    for found in all_releases():
        if found.version == version:
            return found
    raise LookupError(f"release {version!r} is not named in releases.toml")


def previous() -> Release:
    """The newest release named: the one HEAD's schema must serve (docs/upgrades.md)."""
    named = all_releases()
    if not named:
        raise LookupError("releases.toml names no release")
    return named[-1]


def cache_root() -> Path:
    configured = os.environ.get("JOBWARDEN_RELEASES_CACHE")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "jobwarden" / "releases"


def install(which: str | Release, *, extras: Sequence[str] = ()) -> Installed:
    """The release (a version named in releases.toml, or a Release) installed with
    ``extras``; built on first use, then taken from the cache."""
    found = release(which) if isinstance(which, str) else which
    home = cache_root() / found.commit
    home.mkdir(parents=True, exist_ok=True)
    wanted = sorted(set(extras))
    venv = home / ("venv-" + ("-".join(wanted) if wanted else "base"))
    source = home / "source"
    with _locked(home / ".lock"):
        if not _complete(source):
            _build_source(found, source)
        if not _complete(venv):
            _build_venv(source, venv, wanted)
    return Installed(release=found, source=source, venv=venv)


def process_env(**extra: str) -> dict[str, str]:
    """The environment of a process the upgrade tests start (of either release): this
    one's without its ``JOBWARDEN_*`` settings (the test run's own), plus ``extra``."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("JOBWARDEN_")},
            **extra}


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


_MARK = ".jobwarden-release-complete"


def _complete(path: Path) -> bool:
    return (path / _MARK).is_file()


def _fresh(path: Path) -> Path:
    """A new empty directory beside ``path``, to build in and then rename into place."""
    if path.exists():
        shutil.rmtree(path)
    return Path(tempfile.mkdtemp(prefix=f".{path.name}-", dir=path.parent))


def _build_source(found: Release, source: Path) -> None:
    present = subprocess.run(
        ["git", "-C", str(REPO), "cat-file", "-e", f"{found.commit}^{{commit}}"],
        check=False, capture_output=True)
    if present.returncode != 0:
        raise RuntimeError(
            f"release {found.version}'s commit {found.commit[:12]} is not in this clone's "
            "history: a shallow clone? (git fetch --unshallow)")
    building = _fresh(source)
    archive = building / "tree.tar"
    with open(archive, "wb") as handle:
        subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", found.commit],
                       stdout=handle, check=True, timeout=BUILD_TIMEOUT)
    tree = building / "tree"
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    archive.unlink()
    (tree / _MARK).write_text(f"{found.version} {found.commit}\n")
    tree.rename(source)
    shutil.rmtree(building)


def _build_venv(source: Path, venv: Path, extras: list[str]) -> None:
    # A venv's scripts name its own path: it is built where it will live, and marked
    # complete only once pip has finished (an interrupted build is removed and redone).
    if venv.exists():
        shutil.rmtree(venv)
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True,
                       timeout=BUILD_TIMEOUT)
        target = str(source) + (f"[{','.join(extras)}]" if extras else "")
        subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
                        "--disable-pip-version-check", target],
                       check=True, timeout=BUILD_TIMEOUT, cwd=venv.parent)
    except BaseException:
        shutil.rmtree(venv, ignore_errors=True)
        raise
    (venv / _MARK).write_text(" ".join(extras) + "\n")

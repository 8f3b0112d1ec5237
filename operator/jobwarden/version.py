"""The release this code is (``jobwarden --version``, ``jobwarden_build_info``).

A literal, not ``importlib.metadata``: reading the installed distribution's
metadata imports the email and zipfile machinery into every process (an idle
worker's resident memory is measured, docs/benchmarks.md), and a checkout run
from its source tree (``PYTHONPATH=operator``) has no metadata to read.
pyproject.toml carries the same string; tests/unit/test_version.py keeps the
two equal. Releases and their commits are named in releases.toml at the root of
the repository; CHANGELOG.md says what each changed (docs/upgrades.md).
"""

from __future__ import annotations

#: This code's release. Between releases it names the next one (unreleased in
#: CHANGELOG.md until releases.toml names its commit).
VERSION = "0.2.0"


def parse(text: str) -> tuple[int, ...]:
    """A release's number as a comparable tuple: ``"0.10.0"`` sorts after ``"0.9.1"``.

    Releases are plain ``MAJOR.MINOR.PATCH`` (no pre-release suffixes): the
    schema records which releases it serves by comparing them (docs/upgrades.md).
    """
    parts = text.strip().split(".")
    if len(parts) != 3 or not all(part.isdigit() for part in parts):
        raise ValueError(f"not a release number (MAJOR.MINOR.PATCH): {text[:60]!r}")
    return tuple(int(part) for part in parts)

"""Every import path 0.1.0's docs gave users still imports, to the same objects.

0.2.0 grouped the package root by concept (``api/``, ``coordination/``,
``observability/`` ...). A minor release must not break code written against
0.1.0's docs, so the paths they named are listed here: the package's public
names, and the modules the docs told users to import or call into. The two that
moved (``jobwarden.leases``, ``jobwarden.metrics``) are re-exports of their new
homes, and must hand out the very same objects (one lease telemetry list, one
metrics registry), not copies.
"""

from __future__ import annotations

import importlib

import pytest

import jobwarden

#: (module, attribute) pairs that 0.1.0's README and docs/ name.
DOCUMENTED = [
    ("jobwarden.settings", "WorkerSettings"),          # docs/cli.md
    ("jobwarden.metrics", "REGISTRY"),                 # docs/cli.md
    ("jobwarden.leases", "subscribe"),                 # docs/leases.md
    ("jobwarden.leases", "LeaseEvent"),                # docs/leases.md
    ("jobwarden.assembly", "build_worker"),            # docs/tracing.md
    ("jobwarden.cli", "main"),                         # docs/recipes.md
    ("jobwarden.schedules", "parse"),                  # docs/schedules.md
    ("jobwarden.schedules.registry", "schedule"),      # docs/schedules.md
    ("jobwarden.schedules.runner", "enqueue_due"),     # docs/schedules.md
]

#: 0.1.0's path -> where the module lives since 0.2.0.
MOVED = {"jobwarden.leases": "jobwarden.coordination.leases",
         "jobwarden.metrics": "jobwarden.observability.metrics"}


@pytest.mark.parametrize(("module", "name"), DOCUMENTED)
def test_a_documented_path_imports(module: str, name: str) -> None:
    assert hasattr(importlib.import_module(module), name)


@pytest.mark.parametrize("old", sorted(MOVED))
def test_a_moved_path_hands_out_the_same_objects(old: str) -> None:
    before, now = importlib.import_module(old), importlib.import_module(MOVED[old])
    public = [n for n in vars(now) if not n.startswith("_")]
    assert public
    for name in public:
        assert getattr(before, name) is getattr(now, name), name


def test_every_public_name_of_the_package_resolves() -> None:
    for name in jobwarden.__all__:
        assert getattr(jobwarden, name) is not None, name

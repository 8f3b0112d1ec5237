"""Registry of benchmarked systems, imported lazily by name.

Lazy, so that a worker child process imports only its own library (its idle
RSS is one of the measurements) and a missing peer only removes its column.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from bench.adapters import base

MODULES: dict[str, str] = {
    "jobwarden": "bench.adapters.jobwarden_adapter",
    "procrastinate": "bench.adapters.procrastinate_adapter",
    "pgqueuer": "bench.adapters.pgqueuer_adapter",
}


class Unavailable(Exception):
    """The system cannot be benchmarked here (library missing or not ready)."""


def load(name: str) -> base.System:
    """Import the adapter for ``name`` and build its system, or raise ``Unavailable``."""
    try:
        module = importlib.import_module(MODULES[name])
    except KeyError:
        raise Unavailable(f"unknown system {name!r} (known: {', '.join(MODULES)})") from None
    except ImportError as exc:
        raise Unavailable(f"{name}: {exc}") from exc
    system: base.System = module.system()
    return system


def load_all(names: Sequence[str], *, allow_missing: bool, verb: str) -> list[base.System] | None:
    """Every named system, skipping (and saying so) those that cannot be loaded when
    ``allow_missing``; None (after one line on stderr) when one is missing otherwise."""
    systems: list[base.System] = []
    for name in names:
        try:
            systems.append(load(name))
        except Unavailable as exc:
            if not allow_missing:
                print(f"cannot {verb} {exc} (--allow-missing skips it)", file=sys.stderr)
                return None
            print(f"skipping {exc}", file=sys.stderr)
    return systems

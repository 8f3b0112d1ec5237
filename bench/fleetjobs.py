"""The jobs of ``python -m bench.fleet``: a no-op, and one that holds its claim."""

from __future__ import annotations

import time

import jobwarden


@jobwarden.job(max_retries=0)
def noop() -> None:
    """Nothing: what a claim, a start and an outcome cost is all there is."""


@jobwarden.job(max_retries=0, timeout=600)
def hold(seconds: float) -> None:
    """Hold a slot (and so a claim that is heartbeated) for ``seconds``."""
    time.sleep(seconds)

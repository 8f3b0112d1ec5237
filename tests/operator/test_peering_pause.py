"""The resync loop pauses while kopf peering pauses the replica (kopf's own log says when)."""

from __future__ import annotations

import logging
import types
from typing import Any

from jobwarden.controller.app import PeeringPause, build_runtime
from jobwarden.controller.config import OperatorConfig
from jobwarden.db.database import Database


def test_kopf_s_pause_and_resume_records_flip_the_runtime_and_pass_unchanged():
    runtime: Any = types.SimpleNamespace(paused=False)
    logger = logging.getLogger(PeeringPause.LOGGER)
    pause = PeeringPause(runtime)
    logger.addFilter(pause)
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    keep = Keep()
    logger.addHandler(keep)
    logger.setLevel(logging.INFO)
    try:
        logger.info("Pausing operations in favour of [<Peer op-2: priority=100>].")
        assert runtime.paused
        logger.info("Resuming operations after the pause. Conflicting operators ... are gone.")
        assert not runtime.paused
        logger.warning("Pausing all operators, including self: [...]")
        assert runtime.paused
        logger.info("Keep-alive in 'jobwarden' cluster-wide: ok.")
        assert runtime.paused
    finally:
        logger.removeFilter(pause)
        logger.removeHandler(keep)
    assert len(seen) == 4


def test_a_peered_operator_starts_paused_as_kopf_does(db: Database) -> None:
    """kopf pre-activates mandatory peering and logs only the resume: a replica that starts
    behind a higher-priority peer never logs "Pausing", so it must start paused."""
    assert build_runtime(db, OperatorConfig(peering="jobwarden")).paused
    assert not build_runtime(db, OperatorConfig()).paused

"""An ``--app`` that breaks the worker it is loaded into: its maintenance thread raises.

Only for showing, as a real process, what a crashed worker thread does: the
worker stops loudly with exit code 70 (docs/cli.md) instead of limping on.
"""

from __future__ import annotations

from jobwarden.worker import worker


def _broken(self: worker.Worker) -> None:
    raise RuntimeError("crashapp: the maintenance thread dies")


worker.Worker._maintenance_loop = _broken  # type: ignore[method-assign]

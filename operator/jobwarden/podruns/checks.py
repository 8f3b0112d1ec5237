"""Arguments of the pod-run API checked before anything is touched (InvalidInput)."""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence

from jobwarden import errors, textrules
from jobwarden.structs.podruns import pod_run_problem

#: claimed_by holds the claimant (operator identity) and later the pod's name.
MAX_CLAIMANT_LENGTH = 253


def pod_runs(values: Sequence[str]) -> list[str]:
    if isinstance(values, str):
        raise errors.InvalidInput("pod_runs must be a list of '<Kind>/<namespace>/<name>'")
    checked = list(values)
    for value in checked:
        problem = pod_run_problem(value)
        if problem is not None:
            shown = textrules.echo(value) if isinstance(value, str) else repr(value)
            raise errors.InvalidInput(f"pod_run {shown} {problem}")
    return checked


def claimant(value: str) -> str:
    return textrules.check_name(value, "claimant", max_length=MAX_CLAIMANT_LENGTH)


def seconds(value: float, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value <= 0:
        raise errors.InvalidInput(f"{what} must be a positive number of seconds")
    return float(value)


def limit(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise errors.InvalidInput("limit must be a non-negative integer")
    return value


def job_id(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise errors.InvalidInput("job id must be a positive integer")
    return value


def claim_token(value: str | uuid.UUID) -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise errors.InvalidInput("claim token must be a UUID") from None

"""What of a job's result is stored: JSON ``jsonb`` accepts, capped in size.

Its own module because both the recorder (a worker's completion) and the
attempt context (``Job.complete_in_transaction``) store results, and the
context must not import the recorder that imports it.
"""

from __future__ import annotations

import json
import math
from typing import Any

from jobwarden import textrules

__all__ = ["cap_result", "storable"]


def _storable_text(text: str) -> str:
    """NUL and lone surrogates (which jsonb refuses) become U+FFFD."""
    if textrules.problem(text) is None:
        return text
    return "".join("\ufffd" if c == "\x00" or "\ud800" <= c <= "\udfff" else c for c in text)


def _storable_key(key: Any) -> str:
    if isinstance(key, str):
        return _storable_text(key)
    if key is None or isinstance(key, (bool, int, float)):
        return json.dumps(key)  # json's own spelling of such keys: null, true, 1, NaN
    return _storable_text(repr(key))


def storable(value: Any) -> Any:
    """``value`` as JSON ``jsonb`` accepts: NaN and infinities become null, other
    objects their repr, unstorable characters U+FFFD."""
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return _storable_text(value)
    if isinstance(value, dict):
        return {_storable_key(k): storable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [storable(v) for v in value]
    return _storable_text(repr(value))


def cap_result(result: Any, max_bytes: int) -> Any:
    """Store results up to ``max_bytes`` of JSON; bigger ones become a marked preview."""
    if result is None:
        return None
    try:
        text = json.dumps(result, allow_nan=False)
        textrules.check_json_text(result, "result")
    except (TypeError, ValueError):
        # Not storable as it is: made storable value by value (never by rewriting
        # the JSON text, which turned "BaNaNa" into "Banulla" and -Infinity into
        # invalid JSON that stopped the recorder).
        result = storable(result)
        text = json.dumps(result, allow_nan=False)
    encoded = text.encode()
    if len(encoded) <= max_bytes:
        return result
    preview = encoded[:max_bytes].decode("utf-8", errors="ignore")
    return {"jobwarden_truncated": True, "original_bytes": len(encoded), "preview": preview}

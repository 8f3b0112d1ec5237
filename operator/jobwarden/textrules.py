"""What text PostgreSQL can store, checked before anything is written.

PostgreSQL ``text`` cannot hold a NUL character, and ``jsonb`` refuses ``\\u0000``
and unpaired UTF-16 surrogates; a lone surrogate cannot even be encoded as UTF-8
to be sent. Left to the database these end as a raw driver error whose text
may echo the whole row (job data included). Here they are refused first, with
a typed error that names the field and never the payload.
"""

from __future__ import annotations

from typing import Any

from jobwarden import errors

#: Integer columns (priority): PostgreSQL ``integer``.
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
#: Queue names: the jobs_queue_length constraint.
MAX_QUEUE_LENGTH = 128
#: A unique key's UTF-8 length: it is a btree key (jobs_unique_key_idx), whose entries
#: must fit in a third of a page (2,704 bytes with the entry's header); longer keys
#: failed in the server with "index row size ... exceeds" as a database fault.
MAX_UNIQUE_KEY_BYTES = 2000


#: The longest input quoted back in an error message: input is not a log.
ECHO_LIMIT = 60


def echo(text: str) -> str:
    """``text`` as it may appear in an error message: repr'd, and cut when long."""
    if len(text) <= ECHO_LIMIT:
        return repr(text)
    return f"{text[:ECHO_LIMIT]!r}... ({len(text)} characters)"


def problem(text: str) -> str | None:
    """Why PostgreSQL cannot store ``text``, or None when it can."""
    if "\x00" in text:
        return "contains a NUL character"
    if not text.isascii() and any("\ud800" <= c <= "\udfff" for c in text):
        return "contains a lone surrogate (not valid Unicode)"
    return None


def check_text(value: str, what: str) -> str:
    """``value`` unchanged, or InvalidInput naming ``what`` (never echoing the value)."""
    found = problem(value)
    if found is not None:
        raise errors.InvalidInput(f"{what} {found}")
    return value


def check_name(value: object, what: str, *, max_length: int) -> str:
    """One rule for every name (queue, lease, host): a string, not blank, storable."""
    if not isinstance(value, str) or not value.strip():
        raise errors.InvalidInput(f"{what} must be a non-blank string")
    if len(value) > max_length:
        raise errors.InvalidInput(
            f"{what} is {len(value)} characters; at most {max_length} are allowed")
    return check_text(value, what)


def check_unique_key(value: object) -> str:
    """A job's unique key: a name (:func:`check_name`) that fits its unique index."""
    key = check_name(value, "unique_key", max_length=MAX_UNIQUE_KEY_BYTES)
    if len(key) * 4 > MAX_UNIQUE_KEY_BYTES:  # only then can it be too long in UTF-8
        size = len(key.encode("utf-8"))
        if size > MAX_UNIQUE_KEY_BYTES:
            raise errors.InvalidInput(
                f"unique_key is {size} bytes in UTF-8; at most {MAX_UNIQUE_KEY_BYTES} are "
                "allowed (it is an index key)")
    return key


def check_json_text(data: Any, what: str = "job data") -> None:
    """Every string and key inside JSON-able ``data`` is storable in ``jsonb``."""
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            check_text(item, f"a string in the {what}")
        elif isinstance(item, dict):
            for key, value in item.items():
                if isinstance(key, str):
                    check_text(key, f"a key in the {what}")
                stack.append(value)
        elif isinstance(item, (list, tuple)):
            stack.extend(item)


def check_int32(value: int, what: str) -> int:
    if not INT32_MIN <= value <= INT32_MAX:
        raise errors.InvalidInput(f"{what} must be between {INT32_MIN} and {INT32_MAX}")
    return value

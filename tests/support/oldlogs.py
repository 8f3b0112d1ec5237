"""What a previous release's pod may print that is not a fault: the tracebacks of clients
that went away (used by the upgrade tests, which hold every other error line against it).

0.1.0's HTTP server (``jobwarden/health.py``, a ThreadingHTTPServer) leaves socketserver to
print, to stderr, the traceback of a client that went away before its answer -- a probe
past its timeoutSeconds on a loaded machine: a line of dashes, "Exception occurred during
processing of request from ...", then frames of socketserver, http.server, socket and
0.1.0's health.py only (reading the request or writing the answer), then BrokenPipeError
or ConnectionResetError (which one a reset socket gives is a race), then dashes. A release
cannot change; HEAD's server says one DEBUG line (CHANGELOG 0.2.0, "Fixed";
tests/unit/test_health_server.py).

Each request has a thread of its own, and the block is written in pieces: each frame (with
its code lines), the "Traceback" line and the error line whole, but the dashes, the head's
words, the client's address and each newline by writes of their own. Two probes that time
out together (liveness and readiness share a period) therefore print their blocks
*interleaved*, down to pieces of one line ("Exception occurred during processing of request
from  File ..."). So the pieces are taken out of the whole of what the process printed, and
only when they add up: as many heads, tracebacks and gone-client errors as blocks, and no
frame of other code left. Another exception (a frame elsewhere, another error, a traceback
without its head, a block cut short) breaks that, and then every line is kept (and checked).
"""

from __future__ import annotations

import re

HEAD = "Exception occurred during processing of request from"
TRACEBACK = "Traceback (most recent call last):\n"
#: socketserver's separator around the traceback it prints.
DASHES = "-" * 40
#: The pieces a block is written in, each whole (see above), in the order they are taken out.
PIECES = [
    re.compile(r'  File "[^"\n]*/(socketserver\.py|http/server\.py|socket\.py'
               r'|jobwarden/health\.py)", line \d+, in \w+\n(    [^\n]*\n)*'),  # with its code
    re.compile(re.escape(TRACEBACK)),
    re.compile(r"(BrokenPipeError|ConnectionResetError): \[Errno \d+\] [^\n]*\n"),
    re.compile(re.escape(DASHES)),
    re.compile(HEAD),
    re.compile(r"\('[0-9a-f.:]*', \d+(, \d+, \d+)?\)"),               # the client's address
]
#: A line a process's logging wrote (JSON, or the text format's timestamp), not stderr's.
LOG_RECORD = re.compile(r"\{|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")


def old_release_log(log: str) -> tuple[list[str], int]:
    """A previous-release pod's log lines without its gone-client tracebacks, and how many
    there were (0 when what the process printed is not made of such blocks and other lines:
    then every line is kept, and checked). Log records are always kept."""
    lines = log.splitlines()
    records = [line for line in lines if LOG_RECORD.match(line)]
    printed = [line for line in lines if not LOG_RECORD.match(line)]
    text = "".join(line + "\n" for line in printed)
    heads = text.count(HEAD)
    if {text.count(TRACEBACK), len(PIECES[2].findall(text)), text.count(DASHES) / 2} != {heads}:
        return records + printed, 0
    rest = text
    for piece in PIECES:
        rest = piece.sub("", rest)
    if "  File " in rest:
        return records + printed, 0
    return records + [line for line in rest.splitlines() if line.strip()], heads

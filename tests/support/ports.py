"""Loopback ports for the servers tests start, handed out without collisions.

Why not ``bind(("127.0.0.1", 0))`` and close, as the tests did: the kernel takes
that port from its ephemeral range, and between the close and the server's own
bind any process on the machine may be given the same port -- another test's
"free" port, or the local end of any outgoing connection (each one takes an
ephemeral port, and a full run opens thousands). A loaded run saw it: a test's
operator died on ``Address already in use`` while the test's ``/readyz`` probe was
answered by the process that had the port.

So ports come from below the ephemeral range (``net.ipv4.ip_local_port_range``,
32768-60999 by default), which the kernel never hands out by itself, and in
sequence across every test process on the machine (xdist workers, the image
tests beside them, a second run): a counter in a file of the temp directory,
advanced under an exclusive ``flock``. A port that is bound now is skipped. A
port comes round again only after the whole range has been handed out.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import tempfile
from pathlib import Path

#: The first port handed out (above the well-known and most registered services' ports).
FIRST = 15000
#: Where the counter is kept (shared by every test process of this machine's user;
#: another user's processes keep their own, and a bound port is skipped either way).
COUNTER = Path(tempfile.gettempdir()) / f"jobwarden-test-ports-{os.getuid()}"


def ephemeral_start() -> int:
    """The first port of the kernel's ephemeral range (32768 where it cannot be read)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    return 32768


def bindable(port: int) -> bool:
    """True when nothing is bound to ``port`` on loopback (or on every address) now."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A loopback port nothing is bound to, not handed out before in this range's round."""
    last = ephemeral_start() - 1
    if last - FIRST < 1000:  # an unusual range: leave the choice to the kernel
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])
    with open(COUNTER, "a+") as counter:
        fcntl.flock(counter, fcntl.LOCK_EX)
        counter.seek(0)
        text = counter.read().strip()
        port = int(text) if text.isdigit() else FIRST
        for _ in range(last - FIRST + 1):
            port = port + 1 if FIRST <= port < last else FIRST
            if bindable(port):
                break
        else:
            raise RuntimeError(f"no free loopback port in {FIRST}-{last}")
        counter.seek(0)
        counter.truncate()
        counter.write(str(port))
        return port

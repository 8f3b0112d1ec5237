"""Hand the memory a start's peak freed back to the system (glibc's ``malloc_trim``).

Why: at a start kopf lists every object at once and queues an event per object,
so thousands of bodies (and what processing them allocates) are alive together;
most are freed once each object was handled, but glibc keeps the freed pages of
its heap mapped, so the resident size at rest stayed at the start's peak (about
1 GB after 2,000 objects; docs/benchmarks.md, "Operator at scale").
``malloc_trim(0)`` returns every whole free page to the system. The resync loop
calls :func:`trim` after each sweep (once a minute); where the C library is not
glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        libc = ctypes.CDLL(name)
        function = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_size_t]
    function.restype = ctypes.c_int
    return function


def trim() -> bool:
    """Release the free pages of the C heap; True when some memory was released."""
    function = _malloc_trim()
    return bool(function(0)) if function is not None else False

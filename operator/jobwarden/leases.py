"""0.1.0's documented path of the lock API (``jobwarden.leases.subscribe``, docs/leases.md).

The module is :mod:`jobwarden.coordination.leases` since 0.2.0; this name stays so
code written for 0.1.0 keeps importing. Nothing in the package imports it
(.importlinter keeps it in the top layer).
"""

from jobwarden.coordination.leases import *  # noqa: F403

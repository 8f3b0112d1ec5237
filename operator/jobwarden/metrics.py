"""0.1.0's documented path of the metrics (``jobwarden.metrics.REGISTRY``, docs/cli.md).

The module is :mod:`jobwarden.observability.metrics` since 0.2.0; this name stays
so code written for 0.1.0 keeps importing. Nothing in the package imports it
(.importlinter keeps it in the top layer).
"""

from jobwarden.observability.metrics import *  # noqa: F403

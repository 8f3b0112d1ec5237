"""YAML for the tests, read with libyaml's loader where PyYAML has it.

The CRDs are ~1 MB of YAML (a WorkerPool's schema embeds the pod template's): PyYAML's
pure-Python ``safe_load`` took 2.0 CPU-seconds to read them, libyaml's 0.27. Every
emulated API server, the chart tests and the upgrade tests read them, on a suite that
is CPU-bound on two cores, so every test reads YAML through here.
"""

from __future__ import annotations

from typing import Any

import yaml

#: libyaml's safe loader when PyYAML was built with it (the wheels are), else PyYAML's own.
Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load(text: str | bytes) -> Any:
    """One YAML document, as ``yaml.safe_load`` reads it."""
    return yaml.load(text, Loader=Loader)


def load_all(text: str | bytes) -> list[Any]:
    """Every document of a YAML stream, as ``yaml.safe_load_all`` reads them."""
    return list(yaml.load_all(text, Loader=Loader))

"""The control-plane binaries and the CLIs the cluster tier drives: helm and kubectl.

The binaries come from scripts/build-kube-tools (built from the Go modules
pinned in tools/, cached outside the repository by version). Where no Go
toolchain exists the whole tier is skipped with one line saying so.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from tests.cluster import pki

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "scripts" / "build-kube-tools"
#: build-kube-tools' exit code when there is no Go toolchain.
NO_GO = 3


class ToolsUnavailable(RuntimeError):
    """The tools cannot be had here (no Go); the tier is skipped with this message."""


def kube_tools() -> Path:
    """The directory of etcd, kube-apiserver, kube-controller-manager and helm."""
    given = os.environ.get("JOBWARDEN_KUBE_TOOLS_BIN")
    if given:
        return Path(given)
    result = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True,
                            check=False, timeout=3600)
    if result.returncode == NO_GO:
        raise ToolsUnavailable("no Go toolchain: the real control plane cannot be built")
    if result.returncode != 0:
        raise RuntimeError(f"scripts/build-kube-tools failed:\n{result.stderr[-4000:]}")
    return Path(result.stdout.strip().splitlines()[-1])


def plane_unavailable() -> str | None:
    """Why a control plane cannot run here (no kube tools, no openssl); None: it can."""
    try:
        kube_tools()
    except ToolsUnavailable as exc:
        return str(exc)
    if not pki.available():
        return "no openssl to make the control plane's certificates"
    return None


class CommandError(RuntimeError):
    """A CLI exited non-zero; stdout and stderr are kept for assertions."""

    def __init__(self, command: list[str], result: subprocess.CompletedProcess[str]) -> None:
        self.returncode, self.stdout, self.stderr = (result.returncode, result.stdout,
                                                     result.stderr)
        super().__init__(f"{' '.join(command)} exited {result.returncode}:\n"
                         f"{result.stderr.strip()}\n{result.stdout[-2000:]}")


class Helm:
    """The real helm CLI with its own config/cache/data directories and the admin kubeconfig."""

    def __init__(self, binary: Path, kubeconfig: Path, home: Path) -> None:
        self.binary, self.kubeconfig, self.home = binary, kubeconfig, home
        home.mkdir(parents=True, exist_ok=True)

    def run(self, *args: str, check: bool = True, timeout: float = 300
            ) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "HELM_"))}
        env.update({"HOME": str(self.home), "HELM_CACHE_HOME": str(self.home / "cache"),
                    "HELM_CONFIG_HOME": str(self.home / "config"),
                    "HELM_DATA_HOME": str(self.home / "data")})
        command = [str(self.binary), f"--kubeconfig={self.kubeconfig}", *args]
        result = subprocess.run(command, capture_output=True, text=True, env=env,
                                check=False, timeout=timeout)
        if check and result.returncode != 0:
            raise CommandError(command, result)
        return result

    def __call__(self, *args: str, timeout: float = 300) -> str:
        return self.run(*args, timeout=timeout).stdout

    def json(self, *args: str) -> Any:
        return json.loads(self(*args, "-o", "json"))

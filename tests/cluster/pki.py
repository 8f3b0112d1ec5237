"""Certificates and keys of a throwaway control plane, made with the openssl CLI.

Why openssl and not a Python library: it is on every machine that has Go and
git, and the project then needs no new dependency for one fixture. Everything is
made fresh per control plane (a few hundred milliseconds): a CA, the API
server's serving certificate for 127.0.0.1/localhost, client certificates
(``system:masters`` for the admin, the test runner and the process kubelet; the
controller manager's own identity; the API server's towards the kubelets), the
kubelets' serving certificate (``kubectl logs`` is proxied to them), and the
ServiceAccount token signing key.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path

DAYS = "2"


class PkiError(RuntimeError):
    """openssl failed; the message carries its stderr."""


def _openssl(*args: str, cwd: Path) -> None:
    result = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True,
                            check=False, timeout=60)
    if result.returncode != 0:
        raise PkiError(f"openssl {' '.join(args)}: {result.stderr.strip()}")


def available() -> bool:
    return shutil.which("openssl") is not None


@dataclasses.dataclass(frozen=True)
class ClientCert:
    cert: Path
    key: Path


@dataclasses.dataclass(frozen=True)
class Pki:
    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    sa_key: Path
    sa_pub: Path
    admin: ClientCert
    controller_manager: ClientCert
    #: The process kubelets' serving certificate (127.0.0.1), which the API server checks
    #: (--kubelet-certificate-authority) when it proxies ``kubectl logs`` to a node.
    kubelet: ClientCert
    #: The API server's client certificate towards the kubelets (--kubelet-client-*).
    apiserver_kubelet_client: ClientCert


def _client(directory: Path, name: str, subject: str) -> ClientCert:
    _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject, cwd=directory)
    ext = directory / f"{name}.ext"
    ext.write_text("keyUsage=critical,digitalSignature,keyEncipherment\n"
                   "extendedKeyUsage=clientAuth\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", DAYS, "-out", f"{name}.crt", "-extfile", ext.name,
             cwd=directory)
    return ClientCert(cert=directory / f"{name}.crt", key=directory / f"{name}.key")


def _serving(directory: Path, name: str, subject: str, san: str) -> ClientCert:
    _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject, cwd=directory)
    ext = directory / f"{name}.ext"
    ext.write_text(f"subjectAltName={san}\n"
                   "keyUsage=critical,digitalSignature,keyEncipherment\n"
                   "extendedKeyUsage=serverAuth\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", DAYS, "-out", f"{name}.crt", "-extfile", ext.name,
             cwd=directory)
    return ClientCert(cert=directory / f"{name}.crt", key=directory / f"{name}.key")


def make(directory: Path) -> Pki:
    """Write every certificate and key into ``directory`` (created)."""
    directory.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", "ca.key", "-out", "ca.crt", "-days", DAYS,
             "-subj", "/CN=jobwarden-test-ca",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature", cwd=directory)
    _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", "serving.key", "-out", "serving.csr", "-subj", "/CN=kube-apiserver",
             cwd=directory)
    (directory / "serving.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
        "DNS:kubernetes.default.svc\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n")
    _openssl("x509", "-req", "-in", "serving.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", DAYS, "-out", "serving.crt", "-extfile", "serving.ext",
             cwd=directory)
    # ServiceAccount tokens: RS256 is what every client library verifies.
    _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048",
             "-out", "sa.key", cwd=directory)
    _openssl("pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=directory)
    admin = _client(directory, "admin", "/O=system:masters/CN=jobwarden-test-admin")
    kcm = _client(directory, "controller-manager", "/CN=system:kube-controller-manager")
    kubelet = _serving(directory, "kubelet", "/CN=process-kubelet", "IP:127.0.0.1")
    kubelet_client = _client(directory, "apiserver-kubelet-client",
                             "/O=system:masters/CN=kube-apiserver-kubelet-client")
    return Pki(ca_cert=directory / "ca.crt", ca_key=directory / "ca.key",
               serving_cert=directory / "serving.crt", serving_key=directory / "serving.key",
               sa_key=directory / "sa.key", sa_pub=directory / "sa.pub", admin=admin,
               controller_manager=kcm, kubelet=kubelet,
               apiserver_kubelet_client=kubelet_client)

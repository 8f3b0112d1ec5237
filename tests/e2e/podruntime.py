"""What the process kubelet's "container runtime" does: images, users, probes, memory.

Kept apart from the kubelet's loop (tests/e2e/kubelet.py) so that each rule a
real node applies to a container is one small function here, with the reason
it deviates from a node where it does:

* **Images** (:class:`Images`): every image runs the host's interpreter (the
  repository's code), as if it were the Jobwarden image or one built on it --
  except an image whose registry host ends in ``.invalid`` (RFC 2606: such a
  name never resolves), which fails to pull exactly as an unreachable registry
  does (``ErrImagePull``, then ``ImagePullBackOff``). A resolver can map other
  names to failures or to a root filesystem.
* **Users** (:func:`launcher`): ``runAsUser``/``runAsGroup``/``fsGroup`` of the
  container (else the pod, else the image's ``USER``: 10001:10001 as in the
  Dockerfile) become the process's real ids through ``setpriv``, when the
  kubelet runs as root. The one extra: the ambient capability
  ``CAP_DAC_READ_SEARCH``, so the process may *read* the host interpreter and
  the repository even where they sit under a 0700 directory (a test machine's
  ``/root``); it can still write only what its uid/gid may. ``runAsNonRoot``
  with an effective uid 0 refuses to start (``CreateContainerConfigError``).
* **Probes** (:func:`probe`): ``httpGet``, ``tcpSocket`` and ``exec`` (the
  command run with the container's env and ids, success on exit 0 within
  ``timeoutSeconds``).
* **Memory** (:func:`memory_limit`, :func:`rss`): a container with
  ``resources.limits.memory`` is SIGKILLed once its resident set exceeds the
  limit and reported ``OOMKilled`` (exit 137). A kernel enforces this at
  allocation time; the kubelet samples every pass (0.2 s), so a process may
  overshoot briefly before it is killed.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import socket
import subprocess
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: The image's ``USER`` when the pod does not say: the Dockerfile's ``USER 10001:10001``.
IMAGE_USER = (10001, 10001)
#: Exit code a runtime reports when the container's process could not be started.
START_ERROR_EXIT = 128


class StartFailure(Exception):
    """A container cannot be started (yet): the waiting reason and message a kubelet reports.

    ``event`` is the Event reason a kubelet records for it (``Failed``, ``FailedMount``).
    ``retry``: whether the kubelet keeps trying (a missing Secret may appear; a start
    error is a container exit that the restart policy decides on).
    """

    reason = "ContainerCreating"
    event = "Failed"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class MountFailure(StartFailure):
    reason = "ContainerCreating"
    event = "FailedMount"


class ConfigFailure(StartFailure):
    reason = "CreateContainerConfigError"


class PullFailure(StartFailure):
    reason = "ErrImagePull"


class StartError(StartFailure):
    """The runtime could not exec the command: a terminated container, exit 128."""

    reason = "StartError"


@dataclasses.dataclass(frozen=True)
class Code:
    """Host mode: the code an image stands for when it is not the repository's own -- an
    earlier release's image (tests/cluster/test_helm_upgrade.py), or a tool's.

    ``python`` runs the container's ``jobwarden`` (as ``python -m jobwarden``: the
    release's virtualenv); ``source`` is the process's ``PYTHONPATH`` and working
    directory (that release's tree, whose ``tests.support`` job modules it imports);
    ``path`` is put first on ``PATH`` (a tool image's binaries, e.g. kubectl).
    """

    python: Path
    source: Path
    path: tuple[Path, ...] = ()


@dataclasses.dataclass(frozen=True)
class Image:
    """What a pulled image gives a container: its ``USER`` (uid, gid); in image mode also
    its root filesystem, ``Env`` and ``WorkingDir``; in host mode the code it holds when
    that is not the repository's (:class:`Code`)."""

    ref: str
    user: tuple[int, int] = IMAGE_USER
    root: Path | None = None
    env: tuple[tuple[str, str], ...] = ()
    workdir: str = "/"
    code: Code | None = None


def registry_host(ref: str) -> str | None:
    """The registry host of an image reference, None for Docker Hub short names."""
    first, sep, _ = ref.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first.split(":")[0]
    return None


class Images:
    """Resolves image references (see the module docstring); ``failures`` maps a reference
    to the pull error message it gets; ``code`` (host mode) maps a reference to the code
    it holds (:class:`Code`), every other reference being the repository's own."""

    def __init__(self, failures: dict[str, str] | None = None, *,
                 root: Image | None = None, code: dict[str, Code] | None = None) -> None:
        self.failures = dict(failures or {})
        #: Image mode: every image that resolves runs in this image's root filesystem.
        self.root = root
        self.code = dict(code or {})

    def pull(self, ref: str) -> Image:
        if ref in self.failures:
            raise PullFailure(self.failures[ref])
        host = registry_host(ref)
        if host is not None and host.endswith(".invalid"):
            raise PullFailure(
                f'failed to pull and unpack image "{ref}": failed to resolve reference '
                f'"{ref}": failed to do request: Head "https://{host}/v2/": '
                f"dial tcp: lookup {host}: no such host")
        if self.root is not None:
            return dataclasses.replace(self.root, ref=ref)
        # By the exact reference, else by its repository (any tag of a tool's image).
        return Image(ref, code=self.code.get(ref) or self.code.get(ref.rsplit(":", 1)[0]))


def host_paths(args: list[str], mounts: dict[str, Path]) -> list[str]:
    """Host mode: arguments naming a path under a volume's mount (``/crds``,
    ``--flag=/tmp/x``) rewritten to where the volume is on the host, as the environment's
    values are -- the process is not in a mount namespace of its own."""

    def rewrite(value: str) -> str:
        for mount_path, local in mounts.items():
            base = mount_path.rstrip("/")
            if value == base or value.startswith(base + "/"):
                return str(local) + value[len(base):]
        return value

    out = []
    for arg in args:
        flag, eq, value = arg.partition("=")
        out.append(f"{flag}={rewrite(value)}" if eq and flag.startswith("-")
                   else rewrite(arg))
    return out


@dataclasses.dataclass(frozen=True)
class Identity:
    """The ids a container's process runs with; None fields: the kubelet's own."""

    uid: int | None
    gid: int | None
    groups: tuple[int, ...] = ()


def identity(pod_spec: dict[str, Any], container: dict[str, Any], image: Image,
             *, pod_name: str) -> Identity:
    """The effective ids, checked against ``runAsNonRoot`` as a kubelet checks them."""
    pod_ctx = pod_spec.get("securityContext") or {}
    ctx = container.get("securityContext") or {}

    def pick(key: str) -> Any:
        return ctx[key] if ctx.get(key) is not None else pod_ctx.get(key)

    uid = pick("runAsUser")
    gid = pick("runAsGroup")
    uid = image.user[0] if uid is None else int(uid)
    gid = image.user[1] if gid is None else int(gid)
    if pick("runAsNonRoot") and uid == 0:
        raise ConfigFailure(f'container has runAsNonRoot and image will run as root '
                            f'(pod: "{pod_name}", container: {container.get("name")})')
    groups = [int(g) for g in pod_ctx.get("supplementalGroups") or []]
    if pod_ctx.get("fsGroup") is not None:
        groups.append(int(pod_ctx["fsGroup"]))
    return Identity(uid, gid, tuple(dict.fromkeys(groups)))


def can_switch_user() -> bool:
    return os.geteuid() == 0 and shutil.which("setpriv") is not None


def launcher(who: Identity, *, image: Image | None = None,
             binds: Sequence[tuple[Path, str, bool]] = ()) -> list[str]:
    """The command prefix that runs a process as ``who`` (empty: as the kubelet).

    Image mode (``image.root``): in a mount namespace of its own, ``binds`` (host path,
    container path, read-only) are mounted into the image's root, then the process is
    chrooted there, as ``who``, in the image's working directory -- no extra capability.
    """
    switch: list[str] = []
    if who.uid is not None and can_switch_user():
        groups = ",".join(str(g) for g in who.groups)
        switch = ["setpriv", f"--reuid={who.uid}", f"--regid={who.gid}",
                  f"--groups={groups}" if groups else "--clear-groups"]
        if image is None or image.root is None:
            switch += ["--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"]
        switch.append("--")
    if image is None or image.root is None:
        return switch
    mounts: list[str] = []
    for host, inside, read_only in binds:
        target = within(image.root, inside)
        target.mkdir(parents=True, exist_ok=True)
        mounts += [str(host), str(target), "ro" if read_only else "rw"]
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", CHROOT,
            "chroot", str(image.root), *mounts, "--", "/usr/bin/env", "-C", image.workdir,
            *(["/usr/bin/" + switch[0], *switch[1:]] if switch else [])]


#: Image mode's launcher (run by ``sh -c`` in a new mount namespace): /dev, /proc and the
#: pod's volumes mounted into the image root (targets already resolved inside it), then
#: ``chroot`` there.
CHROOT = """set -e
root=$1; shift
mount --rbind /dev "$root/dev"
mount -t proc proc "$root/proc"
while [ "$1" != "--" ]; do
  mount --bind "$1" "$2"
  if [ "$3" = ro ]; then mount -o remount,bind,ro "$2"; fi
  shift 3
done
shift
exec chroot "$root" "$@"
"""


def within(root: Path, path: str) -> Path:
    """``path`` of the container as a host path under ``root``, its symlinks resolved
    inside the root (the image's ``/var/run -> /run`` must not lead to the host's /run)."""
    parts = [p for p in path.split("/") if p]
    resolved: list[str] = []
    hops = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            resolved = resolved[:-1]
            continue
        if part == ".":
            continue
        candidate = root.joinpath(*resolved, part)
        if candidate.is_symlink():
            hops += 1
            if hops > 40:
                raise StartError(f"too many levels of symbolic links in {path}")
            link = os.readlink(candidate)
            parts = [p for p in link.split("/") if p] + parts
            if link.startswith("/"):
                resolved = []
            continue
        resolved.append(part)
    return root.joinpath(*resolved)


def resolve_command(command: list[str], env: dict[str, str], root: Path | None = None
                    ) -> list[str]:
    """``command[0]`` made absolute along the container's PATH (inside ``root`` in image
    mode); a StartError if absent."""
    head = command[0]
    if root is not None:
        dirs = [head.rsplit("/", 1)[0] or "/"] if "/" in head else \
            (env.get("PATH") or "/usr/local/bin:/usr/bin:/bin").split(":")
        name = head.rsplit("/", 1)[-1]
        hits = [f"{d.rstrip('/')}/{name}" for d in dirs
                if os.access(within(root, f"{d.rstrip('/')}/{name}"), os.X_OK)]
        if hits:
            return [hits[0], *command[1:]]
        found: str | None = None
    else:
        found = head if "/" in head else shutil.which(head, path=env.get("PATH"))
    if found is None or not os.access(found, os.X_OK):
        raise StartError(
            "failed to create containerd task: failed to create shim task: OCI runtime "
            "create failed: runc create failed: unable to start container process: "
            f'exec: "{head}": executable file not found in $PATH: unknown')
    return [found, *command[1:]]


def own(path: Path, who: Identity, *, mode: int | None = None) -> None:
    """Give a volume directory/file to the container's user, as fsGroup ownership does."""
    if os.geteuid() != 0 or who.uid is None:
        return
    group = who.groups[-1] if who.groups else who.gid
    os.chown(path, who.uid if path.is_dir() else 0, group if group is not None else -1)
    if mode is not None:
        path.chmod(mode)


# -- probes ----------------------------------------------------------------------------------

def probe(spec: dict[str, Any], *, ports: dict[str, int], env: dict[str, str],
          prefix: list[str], cwd: Path, root: Path | None = None) -> bool:
    """One probe attempt (``httpGet``, ``tcpSocket`` or ``exec``): did it succeed?"""
    timeout = float(spec.get("timeoutSeconds", 1))
    if "httpGet" in spec:
        get = spec["httpGet"]
        port = ports.get(str(get.get("port")))
        if port is None:
            return False
        path = get.get("path", "/")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}",
                                        timeout=timeout) as response:
                return bool(200 <= response.status < 400)
        except (OSError, urllib.error.URLError):
            return False
    if "tcpSocket" in spec:
        port = ports.get(str(spec["tcpSocket"].get("port")))
        if port is None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=timeout):
                return True
        except OSError:
            return False
    if "exec" in spec:
        command = list(spec["exec"].get("command") or [])
        if not command:
            return False
        try:
            command = resolve_command(command, env, root)
            result = subprocess.run([*prefix, *command], env=env, cwd=cwd, timeout=timeout,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    check=False)
        except (StartError, subprocess.TimeoutExpired, OSError):
            return False
        return result.returncode == 0
    return True  # a probe without a handler is refused by the API server; never seen


# -- memory ----------------------------------------------------------------------------------

_QUANTITY = re.compile(r"^([0-9.]+)([a-zA-Z]*)$")
_UNITS = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
          "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def memory_limit(container: dict[str, Any]) -> int | None:
    """``resources.limits.memory`` in bytes, or None."""
    raw = ((container.get("resources") or {}).get("limits") or {}).get("memory")
    if raw is None:
        return None
    match = _QUANTITY.match(str(raw))
    if match is None or match.group(2) not in _UNITS:
        return None
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def rss(pid: int) -> int:
    """The resident set of ``pid`` and its descendants in bytes (0 once gone)."""
    total = 0
    for one in (pid, *_descendants(pid)):
        try:
            for line in Path(f"/proc/{one}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except (OSError, ValueError):
            continue
    return total


def _descendants(pid: int) -> list[int]:
    found: list[int] = []
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        try:
            children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
        except OSError:
            continue
        kids = [int(c) for c in children]
        found.extend(kids)
        frontier.extend(kids)
    return found


def exit_code(returncode: int) -> int:
    """A runtime's exit code: 128 + N for a process ended by signal N."""
    return 128 - returncode if returncode < 0 else returncode




# -- local storage (eviction) ----------------------------------------------------------------

def quantity(raw: Any) -> int | None:
    """A resource quantity (``64Mi``, ``1G``, ``500``) in bytes, or None."""
    match = _QUANTITY.match(str(raw))
    if match is None or match.group(2) not in _UNITS:
        return None
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def storage_limit(container: dict[str, Any]) -> int | None:
    """``resources.limits.ephemeral-storage`` in bytes, or None."""
    raw = ((container.get("resources") or {}).get("limits") or {}).get("ephemeral-storage")
    return None if raw is None else quantity(raw)


def disk_usage(path: Path) -> int:
    """Bytes the files under ``path`` occupy (allocated blocks, as ``du`` counts them)."""
    total = 0
    for folder, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_blocks * 512
            except OSError:
                continue
    return total


@dataclasses.dataclass(frozen=True)
class Scratch:
    """An emptyDir of a running container: where it lives, its ``sizeLimit`` (bytes)."""

    volume: str
    path: Path
    size_limit: int | None
    size_text: str = ""


def storage_violation(scratch: list[Scratch], limit: int | None, limit_text: str) -> str | None:
    """The kubelet's eviction message when local storage exceeds a limit, else None.

    The checks and messages of the kubelet's eviction manager (pkg/kubelet/eviction):
    an emptyDir over its ``sizeLimit``, then the pod's emptyDirs over the container's
    ``limits.ephemeral-storage``.
    """
    used = 0
    for one in scratch:
        size = disk_usage(one.path)
        used += size
        if one.size_limit is not None and size > one.size_limit:
            return f'Usage of EmptyDir volume "{one.volume}" exceeds the limit ' \
                   f'"{one.size_text}". '
    if limit is not None and used > limit:
        return f"Pod ephemeral local storage usage exceeds the total limit of containers " \
               f"{limit_text}. "
    return None

"""The emulated API as a real HTTP server in a background thread, with a synchronous facade.

Tests are synchronous; kubectl is a subprocess; kopf runs its own event loop
in a thread or a subprocess. So the emulator gets its own thread and loop, is
reached over 127.0.0.1 like a real cluster, and every direct read or write from
a test is marshalled onto that loop (the emulator is single-threaded by design:
its writes and its watch fan-out must not interleave).

The listener is aiohttp's low-level server around kmock's handler rather than
``kmock.Server``: the latter also patches aiohttp's resolver process-wide and
insists on being exited in LIFO order, which breaks with two emulated clusters
in one test and with kopf's own aiohttp client in the same process.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import pathlib
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import aiohttp.web
import kmock
import yaml

from tests.support.waiting import TIMEOUT_SECONDS

from . import crds, patching
from .emulator import KubeEmulator

T = TypeVar("T")
ResourceRef = str | kmock.resource


#: How long start() waits for the emulator's server to listen.
START_DEADLINE_SECONDS = 120.0


class KubeAPI:
    """One emulated cluster: ``.url``, ``.kubeconfig``, and direct access for assertions.

    Resources are named as kubectl names them (``"pods"``, ``"js"``, ``"JobSchedule"``,
    ``"jobschedules.jobwarden.io"``) or given as ``kmock.resource``.
    """

    def __init__(
        self, *, workdir: pathlib.Path, crd_paths: Iterable[pathlib.Path] = (), name: str = "kmock"
    ):
        self.workdir = workdir
        self.name = name
        self._crd_paths = list(crd_paths)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._changed = threading.Condition()
        self._changes = 0
        self._emulator: KubeEmulator | None = None
        self.port = 0

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> KubeAPI:
        self._thread = threading.Thread(target=self._run, name=f"kube-api-{self.name}", daemon=True)
        self._thread.start()
        # A deadline, not a speed bound: it starts in 1-3 s, but a fresh-clone run on a
        # saturated 2-core machine (load 30) was seen past 30 s. A failure to start
        # sets the event at once, so a broken emulator still fails fast.
        if not self._ready.wait(timeout=START_DEADLINE_SECONDS):
            raise RuntimeError("the emulated Kubernetes API did not start within "
                               f"{START_DEADLINE_SECONDS:.0f} s")
        if self._failure is not None:
            raise RuntimeError("the emulated Kubernetes API failed to start") from self._failure
        self._write_kubeconfig()
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stopping is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
            self._thread.join(timeout=30)

    def __enter__(self) -> KubeAPI:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:  # surfaced to start() instead of dying silently in the thread
            self._failure = exc
            self._ready.set()
        finally:
            loop.close()

    async def _serve(self) -> None:
        self._stopping = asyncio.Event()
        emulator = KubeEmulator()
        emulator.add_listener(self._notify)
        for document in crds.load_documents(self._crd_paths):
            emulator.create_object(emulator.resolve("customresourcedefinitions"), None, document)
        self._emulator = emulator
        async with emulator:
            runner = aiohttp.web.ServerRunner(aiohttp.web.Server(emulator), shutdown_timeout=1.0)
            await runner.setup()
            site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            self.port = runner.addresses[0][1]
            self._ready.set()
            try:
                await self._stopping.wait()
            finally:
                emulator.close_watches()
                await runner.cleanup()

    def _moved_since(self, seen: int) -> bool:
        return self._changes != seen

    def _notify(self) -> None:
        with self._changed:
            self._changes += 1
            self._changed.notify_all()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def emulator(self) -> KubeEmulator:
        """The kmock handler itself: its DSL (fault injection), ``.requests``, ``.objects``.

        Touch it from the test thread only for the DSL and for reading; use the methods of this
        class to change objects, so that watches see the change.
        """
        assert self._emulator is not None, "the server is not started"
        return self._emulator

    @property
    def kubeconfig(self) -> pathlib.Path:
        return self.workdir / f"{self.name}.kubeconfig"

    def _write_kubeconfig(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": self.name, "cluster": {"server": self.url}}],
            "users": [{"name": self.name, "user": {"token": "kmock-test-token"}}],
            "contexts": [
                {
                    "name": self.name,
                    "context": {"cluster": self.name, "user": self.name, "namespace": "default"},
                }
            ],
            "current-context": self.name,
        }
        self.kubeconfig.write_text(yaml.safe_dump(config), encoding="utf-8")

    # ------------------------------------------------------------------ synchronous access

    def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn`` on the server's loop and return its result (or raise its exception)."""
        assert self._loop is not None, "the server is not started"
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:
                future.set_exception(exc)

        self._loop.call_soon_threadsafe(run)
        return future.result(timeout=30)

    def resource(self, ref: ResourceRef) -> kmock.resource:
        return ref if isinstance(ref, kmock.resource) else self.call(self.emulator.resolve, ref)

    def get(
        self, resource: ResourceRef, name: str, namespace: str | None = "default"
    ) -> dict[str, Any] | None:
        """The stored object, or ``None`` if it does not exist."""
        return self.call(self.emulator.get_object, self.resource(resource), namespace, name)

    def list(
        self,
        resource: ResourceRef,
        namespace: str | None = None,
        *,
        labels: str | None = None,
    ) -> list[dict[str, Any]]:
        from .selectors import label_selector

        return self.call(
            self.emulator.list_objects, self.resource(resource), namespace, label_selector(labels)
        )

    def create(self, obj: Mapping[str, Any], namespace: str | None = None) -> dict[str, Any]:
        """Create an object from a manifest (its apiVersion/kind pick the resource)."""
        resource = self.call(self.emulator.resource_for, obj)
        namespace = namespace or obj.get("metadata", {}).get("namespace") or "default"
        return self.call(self.emulator.create_object, resource, namespace, obj)

    def patch(
        self,
        resource: ResourceRef,
        name: str,
        patch: Any,
        namespace: str | None = "default",
        *,
        subresource: str | None = None,
        content_type: str = patching.MERGE_PATCH,
    ) -> dict[str, Any]:
        return self.call(
            lambda: self.emulator.patch_object(
                self.emulator.resolve(resource) if isinstance(resource, str) else resource,
                namespace,
                name,
                patch,
                content_type=content_type,
                subresource=subresource,
            )
        )

    def delete(
        self,
        resource: ResourceRef,
        name: str,
        namespace: str | None = "default",
        *,
        propagation: str | None = None,
    ) -> dict[str, Any]:
        options = {"propagationPolicy": propagation} if propagation else {}
        return self.call(
            self.emulator.delete_object, self.resource(resource), namespace, name, options
        )

    def events(
        self, namespace: str | None = None, *, involved: str | None = None
    ) -> list[dict[str, Any]]:
        """Core v1 Events, optionally only those about the object named ``involved``."""
        events = self.list("v1/events", namespace)
        return [
            e
            for e in events
            if involved is None or e.get("involvedObject", {}).get("name") == involved
        ]

    def wait(
        self, probe: Callable[[], T], *, timeout: float = TIMEOUT_SECONDS, what: str = "a condition"
    ) -> T:
        """Return ``probe()`` once truthy; re-check after every change, fail at the deadline."""
        deadline = time.monotonic() + timeout
        while True:
            with self._changed:
                seen = self._changes
            value = probe()
            if value:
                return value
            with self._changed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(
                        f"timed out after {timeout} s waiting for {what}; last value: {value!r}"
                    )
                self._changed.wait_for(
                    functools.partial(self._moved_since, seen), timeout=remaining
                )

    def wait_for(
        self,
        resource: ResourceRef,
        name: str,
        namespace: str | None = "default",
        *,
        condition: Callable[[dict[str, Any]], bool] = lambda _: True,
        timeout: float = TIMEOUT_SECONDS,
    ) -> dict[str, Any]:
        """The object once it exists and satisfies ``condition``."""

        def probe() -> dict[str, Any] | None:
            obj = self.get(resource, name, namespace)
            return obj if obj is not None and condition(obj) else None

        return self.wait(probe, timeout=timeout, what=f"{resource} {namespace}/{name}")

    def wait_gone(
        self,
        resource: ResourceRef,
        name: str,
        namespace: str | None = "default",
        *,
        timeout: float = TIMEOUT_SECONDS,
    ) -> None:
        self.wait(
            lambda: self.get(resource, name, namespace) is None,
            timeout=timeout,
            what=f"{resource} {namespace}/{name} to disappear",
        )

    def add_crds(self, *paths: pathlib.Path) -> list[dict[str, Any]]:
        """Create the CRDs in these YAML files or directories, as ``kubectl apply`` would."""
        documents = crds.load_documents(paths)
        return [self.create(document) for document in documents]

    @property
    def requests(self) -> list[kmock.Request]:
        """Every request the server has received, in order (kmock's record)."""
        return list(self.emulator)

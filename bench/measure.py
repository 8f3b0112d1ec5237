"""The measurements, each one run of one thing; ``run.py`` repeats and aggregates.

Throughputs are jobs (or operations) per second; latencies milliseconds; RSS
MiB. Every worker-side number comes from a fresh ``bench.child`` process.
"""

from __future__ import annotations

import asyncio
import compileall
import contextlib
import functools
import importlib.util
import json
import math
import os
import statistics
import sys
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from bench.adapters import base

_ROOT = Path(__file__).resolve().parent.parent


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile: an observed value, no interpolation."""
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def rss_mib(pid: int) -> float:
    """Resident set size of a live process, from the kernel's own accounting."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


async def enqueue_single(client: base.Client, *, jobs: int) -> float:
    started = time.perf_counter()
    for i in range(jobs):
        await client.enqueue_one(i)
    return jobs / (time.perf_counter() - started)


async def enqueue_batch(client: base.Client, *, jobs: int, batch: int) -> tuple[float, float]:
    """Jobs per second, and the client's own CPU milliseconds per 1,000 jobs.

    The CPU figure (``time.process_time`` of this process, where every system's
    client runs) hardly depends on what else the machine does, unlike the rate:
    on a loaded shared machine it is the comparable part of the measurement.
    """
    started = time.perf_counter()
    cpu = time.process_time()
    for first in range(0, jobs, batch):
        await client.enqueue_batch(first, min(batch, jobs - first))
    cpu_ms = (time.process_time() - cpu) * 1000 / jobs * 1000
    return jobs / (time.perf_counter() - started), cpu_ms


class Child:
    """A running ``bench.child`` process and its ``BENCH`` event stream."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self._stderr = bytearray()
        assert proc.stderr is not None
        self._drain = asyncio.create_task(self._keep_stderr(proc.stderr))

    async def _keep_stderr(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(65536):
            self._stderr += chunk
            del self._stderr[:-8192]  # the tail is what explains a failure

    async def event(self, expected: str, *, timeout: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no {expected!r} from the worker in {timeout:.0f}s")
            line = await asyncio.wait_for(self.proc.stdout.readline(), timeout=remaining)
            if not line:
                await self.proc.wait()
                raise RuntimeError(f"worker exited ({self.proc.returncode}): {self.tail()}")
            if not line.startswith(b"BENCH "):
                continue
            message: dict[str, Any] = json.loads(line[6:])
            if message["event"] == "error":
                detail = self.tail().strip()
                raise RuntimeError(
                    f"worker failed: {message['error']}" + (f"\n{detail}" if detail else "")
                )
            if message["event"] == expected:
                return message

    def tail(self) -> str:
        return bytes(self._stderr[-2000:]).decode(errors="replace")


@functools.cache
def compile_bytecode(system: str) -> None:
    """Compile the bytecode of ``system``'s package and of the harness, once per run.

    Why: a worker child's idle RSS is one of the figures, and a module CPython
    compiles from source at import leaves about 1.5 MiB of freed compiler memory
    in the malloc heap of an idle Jobwarden worker (docs/benchmarks.md, "Idle
    worker RSS", fifth round). An installed peer (``pip install`` compiles every
    module) never pays that, while a source checkout does whenever nothing has
    written its ``__pycache__`` yet, or never can (``PYTHONDONTWRITEBYTECODE``).
    Compiled here, every system is imported the way an installed package is.
    Already compiled files are only checked (their source's time and size).
    """
    spec = importlib.util.find_spec(system)
    folders = [str(_ROOT / "bench")]
    if spec is not None and spec.submodule_search_locations:
        folders += list(spec.submodule_search_locations)
    for folder in folders:
        compileall.compile_dir(folder, quiet=2)


@contextlib.asynccontextmanager
async def child(system: str, dsn: str, *args: str) -> AsyncIterator[Child]:
    compile_bytecode(system)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_ROOT), env.get("PYTHONPATH")]))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.child",
        "--system",
        system,
        "--dsn",
        dsn,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    handle = Child(proc)
    try:
        yield handle
    finally:
        if proc.returncode is None:
            try:
                await asyncio.wait_for(proc.wait(), timeout=30)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        await handle._drain


async def drain(
    system: str,
    dsn: str,
    client: base.Client,
    *,
    jobs: int,
    setting: base.WorkerSetting,
    timeout: float,
) -> float:
    """Pre-enqueue ``jobs`` (untimed), start one worker, time until all have run."""
    await client.reset()
    for first in range(0, jobs, 1000):
        await client.enqueue_batch(first, min(1000, jobs - first))
    args = ["--mode", "drain", "--n", str(jobs), "--label", setting.label]
    args += ["--timeout", str(timeout)]
    if setting.concurrency is not None:
        args += ["--concurrency", str(setting.concurrency)]
    async with child(system, dsn, *args) as worker:
        result = await worker.event("result", timeout=timeout + 60)
    left = await client.unfinished()
    if left:
        raise RuntimeError(f"{left} jobs still unfinished after the worker stopped")
    return jobs / float(result["elapsed"])


async def trickle(
    system: str,
    dsn: str,
    client: base.Client,
    *,
    jobs: int,
    interval: float,
    warmup: int,
    settle: float,
) -> tuple[float, float, float]:
    """Idle worker RSS, then enqueue-to-start latency p50/p99 for a trickle.

    The clock starts just before the enqueue call (so the enqueue's own commit
    is part of the latency, as a caller sees it) and stops when the job body
    begins, in the worker process. The first ``warmup`` jobs are not counted.
    Returns (p50 ms, p99 ms, idle RSS MiB).
    """
    await client.reset()
    total = warmup + jobs
    args = ["--mode", "trickle", "--n", str(total), "--settle", str(settle)]
    args += ["--timeout", str(total * interval + 120)]
    enqueued: dict[int, float] = {}
    async with child(system, dsn, *args) as worker:
        ready = await worker.event("ready", timeout=120)
        rss = rss_mib(int(ready["pid"]))
        started = time.perf_counter()
        for k in range(total):
            delay = started + k * interval - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            i = k - warmup
            enqueued[i] = time.perf_counter()
            await client.enqueue_one(i)
        result = await worker.event("result", timeout=120)
    starts = {int(i): float(t) for i, t in result["starts"].items()}
    latencies = [(starts[i] - enqueued[i]) * 1000 for i in range(jobs)]
    return percentile(latencies, 50), percentile(latencies, 99), rss

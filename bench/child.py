"""One worker process for one measurement: ``python -m bench.child ...``.

A fresh process per run keeps the runs independent, imports only the system
under test, and makes the idle worker's resident memory a real number the
parent reads from ``/proc/<pid>/status``. The child talks to the parent in
``BENCH {json}`` lines on stdout (libraries may log anything on stderr).

Modes:

* ``drain``: the jobs are already enqueued; time from starting the worker
  until the ``n``-th job has run.
* ``trickle``: start the worker, wait ``settle`` seconds, report ``ready``
  (the parent reads RSS, then enqueues jobs one at a time), and report every
  job's start time on the monotonic clock once ``n`` jobs have run.
* ``shared``: one of several worker processes draining one queue together
  (``bench.growth``): report ``ready`` once the library is imported, start the
  worker on a ``go`` line on stdin (so that every process starts at once),
  report ``progress`` (jobs started so far) every 50 ms, and on a ``stop`` line
  (or end of stdin) stop the worker gracefully and report every job's start time.
  ``--n`` is not used: the parent decides when enough jobs ran, across processes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import threading
import time
from typing import Any

from bench import adapters
from bench.adapters import base


def emit(event: str, **fields: Any) -> None:
    print("BENCH " + json.dumps({"event": event, **fields}), flush=True)


async def _run(system: base.System, args: argparse.Namespace) -> None:
    recorder = base.Recorder(target=args.n)
    stop = asyncio.Event()
    setting = base.WorkerSetting(label=args.label, concurrency=args.concurrency)
    started = time.perf_counter()
    worker = asyncio.create_task(
        system.run_worker(args.dsn, setting=setting, on_job=recorder.on_job, stop=stop)
    )
    if args.mode == "trickle":
        await asyncio.sleep(args.settle)
        if worker.done():
            worker.result()
        emit("ready", pid=os.getpid())
    finished = asyncio.create_task(recorder.done.wait())
    await asyncio.wait({worker, finished}, timeout=args.timeout, return_when="FIRST_COMPLETED")
    if worker.done():
        worker.result()  # raises what killed the worker
        raise RuntimeError("the worker returned before it was asked to stop")
    if not finished.done():
        raise TimeoutError(f"only {recorder.count} of {args.n} jobs ran in {args.timeout}s")
    assert recorder.last_at is not None
    stop.set()
    stopping = time.perf_counter()
    await asyncio.wait_for(worker, timeout=args.timeout)
    emit(
        "result",
        elapsed=recorder.last_at - started,
        stop_seconds=time.perf_counter() - stopping,
        starts={str(i): t for i, t in recorder.starts.items()} if args.mode == "trickle" else {},
    )


async def _shared(system: base.System, args: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    go, stopping = asyncio.Event(), asyncio.Event()

    def commands() -> None:
        for line in sys.stdin:
            if line.strip() == "go":
                loop.call_soon_threadsafe(go.set)
            elif line.strip() == "stop":
                break
        loop.call_soon_threadsafe(stopping.set)

    threading.Thread(target=commands, daemon=True).start()
    recorder = base.Recorder(target=-1)  # never "done": the parent says when to stop
    stop = asyncio.Event()
    setting = base.WorkerSetting(label=args.label, concurrency=args.concurrency)
    emit("ready", pid=os.getpid())
    await go.wait()
    worker = asyncio.create_task(
        system.run_worker(args.dsn, setting=setting, on_job=recorder.on_job, stop=stop)
    )
    stopped = asyncio.create_task(stopping.wait())
    while not stopped.done():
        await asyncio.wait({worker, stopped}, timeout=0.05, return_when="FIRST_COMPLETED")
        if worker.done():
            worker.result()  # raises what killed the worker
            raise RuntimeError("the worker returned before it was asked to stop")
        emit("progress", count=recorder.count)
    stop.set()
    await asyncio.wait_for(worker, timeout=args.timeout)
    emit("result", count=recorder.count, starts=sorted(recorder.starts.values()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.child")
    parser.add_argument("--system", required=True)
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--mode", choices=["drain", "trickle", "shared"], required=True)
    parser.add_argument("--n", type=int, default=0)
    parser.add_argument("--label", default="")
    parser.add_argument("--concurrency", type=int, default=None)
    parser.add_argument("--settle", type=float, default=1.0)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args(argv)
    system = adapters.load(args.system)
    runner: Any
    if system.event_loop == "uvloop":
        import uvloop

        runner = uvloop.run
    else:
        runner = asyncio.run
    try:
        runner(_shared(system, args) if args.mode == "shared" else _run(system, args))
    except Exception as exc:
        emit("error", error=f"{type(exc).__name__}: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())

"""What an idle worker holds: its threads, and the modules it has imported.

Why a test: the idle worker's resident memory is a target (docs/benchmarks.md,
"Idle worker RSS"). Each thread costs ~17 KiB (its stack and malloc arena),
each module its code and objects, and some modules far more (hashlib maps
OpenSSL, prometheus_client its exposition server). A new thread, or a heavy
module loaded before anything uses it, must be a decision: adding one fails
here until the expected sets below say so. Slot threads and the async loop
start with the work (tested below).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable

import jobwarden
from jobwarden.worker.worker import Worker
from tests.conftest import audit_rows
from tests.support import testjobs
from tests.support.waiting import TIMEOUT_SECONDS, wait_for

#: Every thread of an idle, connected, listening worker process (no HTTP port, plain
#: ``def`` jobs): the main thread, psycopg_pool's scheduler and its three workers, and
#: the worker's own four, and the database calls' watchdog (db/deadlines.py: it
#: abandons a call the server does not answer within its bound). No slot thread (the
#: first attempts start them), no heartbeat thread (it starts with the first slot
#: thread: nothing to beat before), no event loop thread (the first ``async def`` job
#: starts it).
IDLE_THREADS = sorted([
    "MainThread",
    "jobwarden-jobwarden-scheduler",
    "jobwarden-jobwarden-worker-0",
    "jobwarden-jobwarden-worker-1",
    "jobwarden-jobwarden-worker-2",
    "jobwarden-fetch",
    "jobwarden-recorder",
    "jobwarden-maintain",
    "jobwarden-listen",
    "jobwarden-db-watchdog",
])


#: Modules an idle worker must not have imported: each is loaded by the first use that
#: needs it (metrics collected, an HTTP port, a span, a SHA-256, a client call, a due
#: or code-defined schedule, a pod run, a migration or release check: the host record's
#: "needs migration N" reads the migration files' names, not the migrations module; a
#: plan run by a client call, a search or bulk action, a job's data checked or decoded).
NOT_IDLE_MODULES = [
    "prometheus_client", "http.server", "opentelemetry.trace", "hashlib", "_hashlib",
    "jobwarden.api.client", "jobwarden.api.asyncclient",
    "jobwarden.schedules.runner", "jobwarden.schedules.registry", "jobwarden.schedules.store",
    "jobwarden.schedules.validation", "jobwarden.schedules.expressions",
    "jobwarden.schedules.planning", "cronsim", "jobwarden.structs.schedules",
    "jobwarden.db.schedules", "jobwarden.db.runnerpass", "jobwarden.db.podruns",
    "jobwarden.coordination.leases", "jobwarden.structs.podruns",
    "jobwarden.db.migrations", "tomllib", "importlib.readers", "importlib.resources.readers",
    "jobwarden.db.plans", "jobwarden.structs.search", "jobwarden.jobs.datatypes",
]


def test_an_idle_worker_process_holds_ten_threads_and_no_module_only_use_needs(
        dsn: str) -> None:
    code = textwrap.dedent(f"""
        import json, os, sys, threading, time
        from jobwarden import settings
        from jobwarden.assembly import build_worker
        from jobwarden.db.database import Database

        with Database({dsn!r}, schema="jobwarden") as db:
            worker = build_worker(db, settings.WorkerSettings(http_port=None))
            worker.start()
            assert worker.listening.wait(30), "never listening"
            # The first maintenance passes (reaper, host registry, schedules) come within
            # 2 s of the start: let them run, their threads would show up here.
            deadline = time.monotonic() + 30
            while any(task.passes == 0 for task in worker.periodic if task.first_delay is None):
                assert time.monotonic() < deadline, "maintenance never ran"
                time.sleep(0.05)
            names = sorted(t.name for t in threading.enumerate())
            tasks = len(os.listdir("/proc/self/task"))  # threads Python does not know of too
            loaded = [m for m in {NOT_IDLE_MODULES!r} if m in sys.modules]
            print(json.dumps({{"names": names, "tasks": tasks, "loaded": loaded}}))
            worker.stop(timeout=5)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["names"] == IDLE_THREADS
    assert found["tasks"] == len(IDLE_THREADS)
    assert found["loaded"] == []


def test_slot_threads_start_with_work_and_a_burst_runs_on_every_slot(
        client: jobwarden.Client, start_worker: Callable[..., Worker], dsn: str) -> None:
    worker = start_worker(concurrency=3)
    assert worker.listening.wait(TIMEOUT_SECONDS)
    assert worker.slots.started == 0

    def started() -> list[str]:
        return [t.name for t in worker._threads._threads]

    assert "jobwarden-heartbeat" not in started()

    first = client.enqueue(testjobs.Record, {"n": 1}).id
    wait_for(lambda: client.job(first).status is jobwarden.JobStatus.COMPLETED,
             message="the first job completed")
    assert worker.slots.started == 1
    assert started().count("jobwarden-heartbeat") == 1  # came with the first slot thread
    second = client.enqueue(testjobs.Record, {"n": 2}).id
    wait_for(lambda: client.job(second).status is jobwarden.JobStatus.COMPLETED,
             message="the second job completed")
    assert worker.slots.started == 1  # a trickle reuses the idle slot thread

    burst = [client.enqueue(testjobs.UntilCancelled, {}).id for _ in range(3)]
    # All three run at once: no attempt waited while a slot could still start.
    wait_for(lambda: len(audit_rows(dsn, "start")) == 3, message="three attempts running")
    assert worker.slots.started == 3
    for job_id in burst:
        client.cancel(job_id)
    wait_for(lambda: len(audit_rows(dsn, "cancelled")) == 3, message="three cancelled")
    assert worker.slots.started == 3  # never more than concurrency
    assert started().count("jobwarden-heartbeat") == 1


def test_an_async_job_starts_the_event_loop_thread_a_plain_worker_never_has(
        client: jobwarden.Client, start_worker: Callable[..., Worker]) -> None:
    worker = start_worker(concurrency=1)
    isolation = worker.isolation
    assert getattr(isolation, "_async", "missing") is None
    sync_id = client.enqueue(testjobs.add, {"a": 1, "b": 2}).id
    wait_for(lambda: client.job(sync_id).status.terminal, message="sync job done")
    assert getattr(isolation, "_async", "missing") is None
    async_id = client.enqueue(testjobs.async_add, [4, 5]).id
    wait_for(lambda: client.job(async_id).status.terminal, message="async job done")
    assert client.job(async_id).result == 9
    assert getattr(isolation, "_async", None) is not None

"""Running one attempt's code, in a thread or in a child process.

Hard timeouts are real: an ``async def`` job is cancelled at its deadline; a
sync job under process isolation runs in a child process that is killed and
replaced; a sync job under thread isolation gets a ``JobTimeout`` raised into
its thread (pure Python code stops at the next bytecode; a blocking C call stops
when it returns) and its slot stays busy until the thread really returns, so a
host never runs more than its cap.
"""

from __future__ import annotations

import asyncio
import ctypes
import threading
import traceback
from collections.abc import Callable
from typing import Any, Protocol

from jobwarden import errors
from jobwarden.jobs import definitions
from jobwarden.worker.context import (
    Attempt,
    AttemptContext,
    Cancelled,
    Failed,
    Outcome,
    Succeeded,
)


def describe(exc: BaseException) -> str:
    """One readable error text for ``last_error``: type, message and the last frames."""
    frames = traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-8)
    text = "".join(frames).strip()
    return text[-8000:]


def failure_from(exc: BaseException, attempt: Attempt) -> Outcome:
    if isinstance(exc, errors.JobCancelled):
        return Cancelled(error=f"cancelled: {exc}")
    if isinstance(exc, (errors.JobTimeout, TimeoutError, asyncio.TimeoutError)):
        return Failed(
            error=f"JobTimeout: attempt {attempt.claim.attempt} passed its "
                  f"{attempt.claim.timeout_seconds:g}s timeout",
            reason="timeout", exception=exc,
        )
    if isinstance(exc, errors.BadJobData):
        return Failed(error=describe(exc), reason="bad_data", retryable=False, exception=exc)
    if isinstance(exc, errors.UnknownJob):
        return Failed(error=str(exc), reason="unknown_job", exception=exc)
    return Failed(error=describe(exc), reason="error", exception=exc)


class Isolation(Protocol):
    """How an attempt's code runs (``--isolation``): in the slot's thread, or a child process.

    Not called a runner: in Jobwarden "runner" means the schedule runner only.
    """

    def run(self, attempt: Attempt, job_class: type[definitions.Job],
            context: AttemptContext) -> Outcome: ...

    def interrupt(self, attempt: Attempt) -> None: ...

    def close(self) -> None: ...


def prepare(job_class: type[definitions.Job], attempt: Attempt,
            context: AttemptContext | None) -> definitions.Job:
    instance = job_class()
    instance.job_id = attempt.claim.id
    instance.attempt = attempt.claim.attempt
    instance._context = context
    return instance


async def perform_async(instance: definitions.Job, data: Any, timeout: float) -> Any:
    async def body() -> Any:
        instance.before_perform(data)
        result = await instance.perform(data)
        instance.after_perform(data, result)
        return result

    return await asyncio.wait_for(body(), timeout)


class AsyncLoop:
    """One event loop thread per worker process for ``async def`` jobs."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name="jobwarden-async", daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            # Stopped is not closed: the loop's selector and self-pipe stay open
            # (a ResourceWarning per worker) until it is closed, here in its thread.
            self.loop.close()

    def run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def close(self) -> None:
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5.0)


class ThreadIsolation:
    """Runs attempts in the calling slot thread (async jobs on the shared loop).

    The loop and its thread start with the first ``async def`` job: a worker whose
    jobs are all plain functions never has them (docs/benchmarks.md, "Idle worker RSS").
    """

    def __init__(self) -> None:
        self._async: AsyncLoop | None = None
        self._async_lock = threading.Lock()
        self._interruptible: dict[int, int] = {}  # job id -> thread id while in perform
        self._pending_exc: set[int] = set()
        self._lock = threading.Lock()

    def run(self, attempt: Attempt, job_class: type[definitions.Job],
            context: AttemptContext) -> Outcome:
        data = attempt.claim.data
        try:
            instance = prepare(job_class, attempt, context)
            if definitions.is_async(job_class):
                result = self._loop().run(
                    perform_async(instance, data, attempt.claim.timeout_seconds)
                )
            else:
                result = self._run_sync(attempt, instance, data)
            return Succeeded(result=result)
        except BaseException as exc:
            if isinstance(exc, (KeyboardInterrupt, SystemExit)) and not isinstance(
                exc, errors.JobwardenError
            ):
                return Failed(error=describe(exc), reason="error", exception=exc)
            return failure_from(exc, attempt)

    def _loop(self) -> AsyncLoop:
        with self._async_lock:
            if self._async is None:
                self._async = AsyncLoop()
            return self._async

    def _run_sync(self, attempt: Attempt, instance: definitions.Job, data: Any) -> Any:
        ident = threading.get_ident()
        with self._lock:
            self._interruptible[attempt.claim.id] = ident
        try:
            instance.before_perform(data)
            result = instance.perform(data)
            instance.after_perform(data, result)
            return result
        finally:
            with self._lock:
                self._interruptible.pop(attempt.claim.id, None)
                if attempt.claim.id in self._pending_exc:
                    self._pending_exc.discard(attempt.claim.id)
                    # The timeout exception may not have been delivered yet: cancel it
                    # so it cannot fire later in the slot thread's own code.
                    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), None)

    def interrupt(self, attempt: Attempt) -> None:
        """Raise JobTimeout inside the attempt's thread if it is still in perform."""
        with self._lock:
            ident = self._interruptible.get(attempt.claim.id)
            if ident is None:
                return
            self._pending_exc.add(attempt.claim.id)
            ctypes.pythonapi.PyThreadState_SetAsyncExc(
                ctypes.c_ulong(ident), ctypes.py_object(errors.JobTimeout)
            )

    def close(self) -> None:
        with self._async_lock:
            loop, self._async = self._async, None
        if loop is not None:
            loop.close()


def call_hook(hook: Callable[..., Any], *args: Any, **kwargs: Any) -> BaseException | None:
    try:
        hook(*args, **kwargs)
    except Exception as exc:
        return exc
    return None

"""How users define jobs: ``class MyJob(jobwarden.Job)`` or ``@jobwarden.job``.

A job is named by its import path, ``"package.module:Name"``, and that path is
what the database stores. Workers resolve it by importing the module, so a job
is whatever the worker's code says it is at run time; the class attributes
(queue, priority, timeout, retries, idempotency) are copied into the row at
enqueue time, because the reaper and other processes must honour them without
importing user code.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, overload

from jobwarden import errors
from jobwarden.structs.policies import OnBusy

if TYPE_CHECKING:
    from jobwarden.worker.context import AttemptContext


class Job:
    """Base class of every job.

    Subclasses set the class attributes and implement ``perform(self, data)``,
    either ``def`` or ``async def``. A fresh instance runs each attempt.
    """

    queue: ClassVar[str] = "default"
    priority: ClassVar[int] = 0
    #: Hard cap on one attempt, in seconds. The attempt really stops (see docs/jobs.md).
    timeout: ClassVar[float] = 300.0
    #: Retries after the first attempt; ``max_retries = 3`` allows 4 attempts.
    max_retries: ClassVar[int] = 3
    #: False: if the worker dies mid-run, the job becomes ``interrupted``, never re-run.
    idempotent: ClassVar[bool] = True
    #: True: every effect commits with ``complete_in_transaction`` (one transaction in
    #: the job's database), so a crash before that commit left nothing behind and the
    #: job is re-run after a crash even when ``idempotent = False`` (stored as such).
    transactional: ClassVar[bool] = False
    #: One run of this class at a time, cluster-wide (lease ``job:<class path>``).
    exclusive: ClassVar[bool] = False
    #: A static concurrency key (lease ``key:<key>``); implies exclusive.
    concurrency_key: ClassVar[str | None] = None
    #: What a busy lease does to this run: defer (default), skip or fail.
    on_busy: ClassVar[OnBusy] = "defer"
    #: Base and cap of the exponential retry backoff, in seconds.
    backoff_base: ClassVar[float] = 2.0
    backoff_max: ClassVar[float] = 3600.0
    #: The type of this job's data (a dataclass, TypedDict or pydantic model), or None
    #: for the annotation of ``perform``'s data parameter (untyped JSON without one).
    #: Checked at enqueue; ``perform`` receives an instance (see jobwarden.jobs.datatypes).
    data_type: ClassVar[Any] = None

    # Set by the worker for each attempt.
    job_id: int
    attempt: int
    _context: AttemptContext | None = None

    def perform(self, data: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.perform() is not implemented")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        perform = cls.__dict__.get("perform")
        if perform is not None and (cls.data_type is not None or _annotated(perform)):
            cls.perform = _typed_perform(perform)  # type: ignore[method-assign]

    # -- lifecycle hooks (best-effort; see docs/jobs.md) ----------------------------

    def before_perform(self, data: Any) -> None:
        """Runs inside the attempt's time limit, before perform; a raise fails the attempt."""

    def after_perform(self, data: Any, result: Any) -> None:
        """Runs inside the time limit after perform returned; a raise fails the attempt."""

    def on_success(self, result: Any) -> None:
        """Runs after the completion was recorded; errors are logged, never change it."""

    def on_failure(self, error: BaseException | str, *, is_final: bool) -> None:
        """Runs after a failure was recorded; errors are logged, never change it."""

    # -- helpers available inside perform -------------------------------------------

    def heartbeat(self) -> None:
        """Record liveness for this claim; raise JobFenced / JobCancelled when it should stop.

        A cheap "do I still own this job?" check between units of work. It does
        not extend the hard timeout.
        """
        if self._context is not None:
            self._context.heartbeat()

    def complete_in_transaction(self, conn: Any, result: Any = None) -> None:
        """Record this attempt as completed inside ``conn``'s open transaction.

        The exactly-once pattern for effects in the same database (River's
        ``JobCompleteTx``): write the effects and call this in one transaction. The
        completion is fenced on this attempt's claim: if the claim was taken over,
        JobFenced is raised (let it roll the transaction back: nothing is applied);
        once the transaction commits, the job is completed with ``result`` and is
        never run again, even if this worker dies a moment later. ``conn`` is a
        psycopg connection or transaction, a SQLAlchemy session or Django's
        connection. The value ``perform`` returns afterwards is not stored.
        """
        if self._context is None:
            raise errors.ConfigurationError(
                "complete_in_transaction() only works inside a worker's attempt")
        self._context.complete_in(conn, result)

    def concurrency_key_for(self, data: Any) -> str | None:
        """Override to derive a concurrency key from the data (wins over the static key)."""
        return None

    @classmethod
    def backoff(cls, attempt: int) -> float:
        """Seconds before retry ``attempt + 1``: exponential with full jitter in [50%, 100%]."""
        ceiling = min(cls.backoff_max, cls.backoff_base * (2 ** max(attempt - 1, 0)))
        return float(ceiling * (0.5 + random.random() / 2))

    @classmethod
    def path(cls) -> str:
        return class_path(cls)


def _annotated(perform: Callable[..., Any]) -> bool:
    params = [p for p in inspect.signature(perform).parameters.values() if p.name != "self"]
    return bool(params) and params[0].annotation not in (inspect.Parameter.empty, "Any", Any)


def _typed_perform(perform: Callable[..., Any]) -> Callable[..., Any]:
    """``perform`` receiving its declared data type; stored data that no longer fits
    is bad data (BadJobData: not retried)."""
    if getattr(perform, "_jobwarden_typed", False):
        return perform
    if inspect.iscoroutinefunction(perform):
        @functools.wraps(perform)
        async def typed_async(self: Job, data: Any) -> Any:
            return await perform(self, typed_data(type(self), data))

        typed_async._jobwarden_typed = True  # type: ignore[attr-defined]
        return typed_async

    @functools.wraps(perform)
    def typed(self: Job, data: Any) -> Any:
        return perform(self, typed_data(type(self), data))

    typed._jobwarden_typed = True  # type: ignore[attr-defined]
    return typed


#: Each job class's data type, resolved on first use. ``jobs.datatypes`` is imported
#: by the first check or decode (an enqueue, an attempt), not with the definitions:
#: every worker imports these, and an idle one never needs the checks (~60 KiB
#: resident; docs/benchmarks.md, "Renovation, no regression (issue 29)").
_DATA_TYPES: dict[type[Job], Any] = {}


def data_type_of(job_class: type[Job]) -> Any | None:
    """The declared data type of a job class (None: untyped JSON); resolved once."""
    if job_class not in _DATA_TYPES:
        from jobwarden.jobs import datatypes  # see _DATA_TYPES

        _DATA_TYPES[job_class] = None if issubclass(job_class, FunctionJob) else \
            datatypes.declared_type(inspect.unwrap(job_class.perform), job_class.data_type)
    return _DATA_TYPES[job_class]


def typed_data(job_class: type[Job], data: Any) -> Any:
    tp = data_type_of(job_class)
    if tp is None:
        return data
    from jobwarden.jobs import datatypes  # see _DATA_TYPES

    if isinstance(tp, type) and not datatypes.is_typeddict_type(tp) and isinstance(data, tp):
        return data
    try:
        return datatypes.decode(tp, data)
    except Exception as exc:
        raise errors.BadJobData(f"stored data does not fit {tp.__name__}: {exc}") from exc


def encode_data(job_class: type[Job], data: Any) -> Any:
    """Check ``data`` against the job's declared type or function signature and return
    what is stored; raises InvalidJobData before anything is written."""
    from jobwarden.jobs import datatypes  # see _DATA_TYPES

    if issubclass(job_class, FunctionJob):
        datatypes.check_call(job_class.function, data)
        return data
    tp = data_type_of(job_class)
    return data if tp is None else datatypes.encode(tp, data)


def class_path(obj: Any) -> str:
    return f"{obj.__module__}:{obj.__qualname__}"


class FunctionJob(Job):
    """The job class a ``@jobwarden.job`` function becomes.

    Data is passed as keyword arguments when it is an object, as positional
    arguments when it is a list, and as nothing when it is null. Anything else is
    bad data: retrying cannot fix it, so the attempt fails without retries.
    """

    function: ClassVar[Callable[..., Any]]

    def perform(self, data: Any) -> Any:
        return call_with_data(type(self).function, data)


def call_with_data(function: Callable[..., Any], data: Any) -> Any:
    if data is None or isinstance(data, (dict, list)):
        from jobwarden.jobs import datatypes  # see _DATA_TYPES

        try:
            args, kwargs = datatypes.decode_call(function, data)
        except Exception as exc:
            raise errors.BadJobData(f"stored data does not fit {function.__qualname__}: "
                                    f"{exc}") from exc
        return function(*args, **kwargs)
    raise errors.BadJobData(
        f"a function job takes an object (keyword arguments), a list or null as data, "
        f"not {type(data).__name__}"
    )


F = TypeVar("F", bound=Callable[..., Any])


class JobFunction:
    """What ``@jobwarden.job`` returns: still callable, and enqueueable by reference."""

    def __init__(self, function: Callable[..., Any], job_class: type[FunctionJob]) -> None:
        functools.update_wrapper(self, function)
        self.function = function
        self.job_class = job_class

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function(*args, **kwargs)

    def path(self) -> str:
        return class_path(self.function)


@overload
def job(function: Callable[..., Any], /) -> JobFunction: ...
@overload
def job(
    *, queue: str = ..., priority: int = ..., timeout: float = ..., max_retries: int = ...,
    idempotent: bool = ..., exclusive: bool = ..., concurrency_key: str | None = ...,
    on_busy: OnBusy = ...,
) -> Callable[[Callable[..., Any]], JobFunction]: ...


def job(
    function: Callable[..., Any] | None = None, /, **options: Any
) -> JobFunction | Callable[[Callable[..., Any]], JobFunction]:
    """Turn a plain (sync or async) function into a job named by its import path."""
    allowed = {"queue", "priority", "timeout", "max_retries", "idempotent", "exclusive",
               "concurrency_key", "on_busy"}
    unknown = set(options) - allowed
    if unknown:
        raise TypeError(f"unknown job option(s): {', '.join(sorted(unknown))}")

    def decorate(fn: Callable[..., Any]) -> JobFunction:
        attrs: dict[str, Any] = dict(options)
        attrs["function"] = staticmethod(fn)
        attrs["__module__"] = fn.__module__
        attrs["__qualname__"] = fn.__qualname__
        attrs["__doc__"] = fn.__doc__
        if inspect.iscoroutinefunction(fn):
            async def perform(self: FunctionJob, data: Any) -> Any:
                return await call_with_data(type(self).function, data)

            attrs["perform"] = perform
        job_class = type(fn.__name__, (FunctionJob,), attrs)
        return JobFunction(fn, job_class)

    if function is not None:
        return decorate(function)
    return decorate


def resolve_path_syntax(path: str) -> tuple[str, str]:
    """Split ``"package.module:Name"``; UnknownJob when it does not look like one."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr or " " in path:
        raise errors.UnknownJob(f"job path {path!r} must look like 'package.module:Name'")
    return module_name, attr


JobRef = type[Job] | JobFunction | str


def reference(job: JobRef, *, must_import: bool,
              try_import: bool = True) -> tuple[str, type[Job] | None]:
    """The stored path of ``job`` and, when it can be imported here, its class.

    A class or a ``@job`` function is its own answer. A path is checked for its
    shape; then, with ``try_import``, imported for its class defaults -- a failure
    raises only with ``must_import`` (the operator and the schedule store name
    jobs whose code lives only in the workers).
    """
    if isinstance(job, JobFunction):
        return job.path(), job.job_class
    if isinstance(job, type) and issubclass(job, Job):
        return job.path(), job
    if isinstance(job, str):
        resolve_path_syntax(job)
        if try_import:
            try:
                return job, resolve(job)
            except errors.UnknownJob:
                if must_import:
                    raise
        return job, None
    raise errors.UnknownJob(
        f"a job is a Job subclass, a @job function or 'package.module:Name', not {job!r}"
    )


def resolve(path: str) -> type[Job]:
    """Import ``"package.module:Name"`` and return its job class.

    Raises UnknownJob with the reason (bad path, import error, not a job).
    """
    module_name, attr = resolve_path_syntax(path)
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise errors.UnknownJob(f"cannot import module {module_name!r} for job {path!r}: "
                                f"{type(exc).__name__}: {exc}") from exc
    target: Any = module
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise errors.UnknownJob(f"module {module_name!r} has no {attr!r} (job {path!r})")
    if isinstance(target, JobFunction):
        return target.job_class
    if isinstance(target, type) and issubclass(target, Job):
        return target
    raise errors.UnknownJob(f"{path!r} is neither a jobwarden.Job subclass nor a @job function")


def is_async(job_class: type[Job]) -> bool:
    return inspect.iscoroutinefunction(job_class.perform)


def overrides(job_class: type[Job], hook: str) -> bool:
    """True when the class defines its own ``hook`` (so the worker can skip no-op calls)."""
    return getattr(job_class, hook) is not getattr(Job, hook)

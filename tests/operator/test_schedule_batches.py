"""A batch of JobSchedule passes (the change queue's) costs a bounded number of statements
and leaves every object as one-by-one passes do.

At a start with 10,000 JobSchedules the rows came at ~115 a second, bound by the
passes' own round trips (five to ten per new schedule: its row read, the insert's
transaction and read back, the history limits, the active jobs, the run Events'
read; docs/benchmarks.md, "Scale (issue 31)"). A batch now reads and writes those
for all of its objects at once (controller/jobschedules/reconciler.py,
``ScheduleReconciler.batch``). Real PostgreSQL; the API server is a fake that
answers each status write with the object, the status merged.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from typing import Any

import kopf
import psycopg
import pytest

from jobwarden.api.client import Client
from jobwarden.controller import resyncing, specs
from jobwarden.controller.app import build_runtime
from jobwarden.controller.config import OperatorConfig
from jobwarden.controller.jobschedules import reconciler as schedules
from jobwarden.controller.kube import events
from jobwarden.controller.kube.kinds import Kind
from jobwarden.db.database import Database
from tests.support.namedqueries import counting


@dataclasses.dataclass
class Operator:
    """One cluster's operator in this process: its JobSchedule kind and resync loop,
    run one step at a time (no threads)."""

    loop: resyncing.Resync
    kind: Kind
    #: The Events posted, as (namespace, name, reason, message).
    posted: list[tuple[str, str, str, str]]

    def cache(self, *bodies: dict[str, Any]) -> list[str]:
        """As the watch delivers them: a new generation with the status written so far."""
        for body in bodies:
            known = self.kind.cache.get(str(body["metadata"]["uid"]))
            self.kind.cache.put({**body, "status": (known or {}).get("status") or {}})
        return [str(b["metadata"]["uid"]) for b in bodies]

    def batch(self, *bodies: dict[str, Any]) -> None:
        """The change queue's pass of ``bodies``, as one batch; their status writes."""
        queue = self.loop.queues[self.kind.name]
        queue.batch = len(bodies)
        for uid in self.cache(*bodies):
            queue.submit(uid, "create")
        assert queue.run_once() == len(bodies)
        self.write()

    def one_by_one(self, *bodies: dict[str, Any]) -> None:
        """A pass of each body on its own (no batch); their status writes."""
        for uid in self.cache(*bodies):
            assert self.loop.reconcile(self.kind, uid, trigger="create", by_resync=False)
        self.write()

    def write(self) -> None:
        writes = self.loop.writes[self.kind.name]
        while writes.pending():
            writes.queue.run_once()

    def status(self, namespace: str, name: str) -> dict[str, Any]:
        [found] = [b for b in self.kind.cache.bodies()
                   if b["metadata"]["namespace"] == namespace and b["metadata"]["name"] == name]
        return dict(found.get("status") or {})


class Answering:
    """The API server's status subresource: every write answered, the status merged."""

    def __init__(self, kind: Kind) -> None:
        self.kind = kind

    def patch_status(self, namespace: str, name: str, status: dict[str, Any]
                     ) -> dict[str, Any] | None:
        [body] = [b for b in self.kind.cache.bodies()
                  if b["metadata"]["namespace"] == namespace and b["metadata"]["name"] == name]
        meta = body["metadata"]
        return {**body, "status": {**(body.get("status") or {}), **status},
                "metadata": {**meta, "resourceVersion": str(int(meta["resourceVersion"]) + 1)}}


def operator(db: Database, monkeypatch: pytest.MonkeyPatch, *, cluster: str = "default"
             ) -> Operator:
    runtime = build_runtime(db, OperatorConfig(pod_name=f"op-{cluster}", cluster=cluster))
    schedules.register(kopf.OperatorRegistry(), runtime)
    loop = resyncing.Resync(runtime)
    [kind] = runtime.kinds
    loop.objects[kind.name] = Answering(kind)  # type: ignore[assignment]
    posted: list[tuple[str, str, str, str]] = []

    def post(body: kopf.Body, told: Any) -> None:
        meta = body["metadata"]
        posted.extend((str(meta["namespace"]), str(meta["name"]), event.reason,
                       event.message) for event in told)
    monkeypatch.setattr(events, "post", post)
    return Operator(loop=loop, kind=kind, posted=posted)


def schedule(namespace: str, name: str, *, cron: str = "0 3 1 1 *", generation: int = 1,
             **spec: Any) -> dict[str, Any]:
    """A JobSchedule whose yearly slot does not come while a test runs."""
    return {"apiVersion": "jobwarden.io/v1alpha1", "kind": "JobSchedule",
            "metadata": {"name": name, "namespace": namespace, "generation": generation,
                         "uid": f"uid-{namespace}-{name}",
                         # A status write adds 1; a new generation is newer than those.
                         "resourceVersion": str(100 * generation),
                         **spec.pop("metadata", {})},
            "spec": {"schedule": cron,
                     "job": {"class": "tests.support.testjobs:Noop", "data": {"n": name}},
                     **spec}}


def test_a_batch_of_new_schedules_costs_the_same_statements_whatever_its_size(
        db: Database, client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    ours = operator(db, monkeypatch)
    calls = counting(db, monkeypatch)
    ours.batch(*(schedule("small", f"s{i}") for i in range(5)))
    small = list(calls)
    calls.clear()
    ours.batch(*(schedule("large", f"s{i}") for i in range(40)))
    large = list(calls)
    print(f"5 new schedules: {small}\n40 new schedules: {large}")
    assert large == small  # the same statements, not more of them
    # digests, rows, now, insert, read back, the new rows' digests and rows, limits,
    # active, jobs
    assert len(small) <= 10
    assert len(client.schedules.list()) == 45
    assert [reason for *_, reason, _ in ours.posted] == ["Created"] * 45


def normalized(value: Any) -> Any:
    """What must be equal between two namespaces' objects: not their names, times or
    job ids."""
    if isinstance(value, dict):
        return {key: "<id>" if key in ("id", "jobId") else normalized(item)
                for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [normalized(item) for item in value]
    if isinstance(value, str):
        value = re.sub(r"\b(one|two)/", "<ns>/", value)
        value = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?", "<time>",
                       value)
        return re.sub(r"job \d+", "job <id>", value)
    return value


def row_of(client: Client, namespace: str, name: str) -> dict[str, Any]:
    """The schedule's row but its name, times and job id ({} when there is none)."""
    found = client.schedules.get(f"{namespace}/{name}")
    if found is None:
        return {}
    row = dataclasses.asdict(found)
    for key in ("name", "created_at", "updated_at", "planned_until", "last_job_id"):
        row.pop(key)
    return dict(normalized(row))


def test_a_mixed_batch_leaves_each_row_status_and_event_as_one_by_one_passes_do(
        db: Database, client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """New, unchanged, changed, invalid; shared with another cluster (the same spec:
    one schedule, whoever wrote it) or in conflict with it; history limits with jobs
    to trim; active jobs; a run-now. Namespace ``one`` is passed object by object,
    ``two`` in one batch; each object ends the same in both."""
    other = operator(db, monkeypatch, cluster="other")
    ours = operator(db, monkeypatch)
    names = ["new", "new-suspended", "unchanged", "changed", "invalid", "shared",
             "conflict", "limited", "busy", "run-now"]
    for namespace in ("one", "two"):
        # What is there before: rows this cluster and another one wrote, jobs.
        ours.one_by_one(schedule(namespace, "unchanged"), schedule(namespace, "changed"),
                        schedule(namespace, "limited"), schedule(namespace, "busy"))
        other.one_by_one(schedule(namespace, "shared"),
                         schedule(namespace, "conflict", cron="0 4 1 1 *"))
        for _ in range(3):
            client.cancel(client.schedules.run_now(f"{namespace}/limited").job_id)
        client.schedules.run_now(f"{namespace}/busy")
    ours.posted.clear()

    def now(namespace: str) -> list[dict[str, Any]]:
        return [schedule(namespace, "new"),
                schedule(namespace, "new-suspended", suspend=True),
                schedule(namespace, "unchanged"),
                schedule(namespace, "changed", cron="30 3 1 1 *", generation=2),
                schedule(namespace, "invalid", cron="not a cron"),
                schedule(namespace, "shared"),
                schedule(namespace, "conflict"),
                schedule(namespace, "limited", generation=2, failedJobsHistoryLimit=1),
                schedule(namespace, "busy"),
                schedule(namespace, "run-now",
                         metadata={"annotations": {schedules.RUN_NOW_ANNOTATION: "r1"}})]

    ours.one_by_one(*now("one"))
    ours.batch(*now("two"))

    for name in names:
        assert row_of(client, "two", name) == row_of(client, "one", name), name
        assert normalized(ours.status("two", name)) == normalized(ours.status("one", name)), \
            name
        told = {namespace: normalized([(reason, message) for ns, n, reason, message
                                       in ours.posted if (ns, n) == (namespace, name)])
                for namespace in ("one", "two")}
        assert told["two"] == told["one"], name
    # What the mix is made of (so that the equalities above say something).
    assert row_of(client, "one", "invalid") == {}
    assert row_of(client, "one", "conflict")["source"] != row_of(client, "one", "new")["source"]
    conditions = {c["type"]: c for c in ours.status("two", "conflict")["conditions"]}
    assert conditions["Conflicting"]["status"] == "True"
    assert [r for ns, n, r, _ in ours.posted if ns == "two" and n == "new"] == ["Created"]
    assert [r for ns, n, r, _ in ours.posted if ns == "two" and n == "changed"] == ["Updated"]
    assert row_of(client, "two", "new-suspended")["suspended"] is True
    assert [status for _, status, *_ in client.schedules.job_outcomes(
        "two/limited", floor=0)] == ["cancelled"]  # the newest of three
    assert len(ours.status("two", "busy")["active"]) == 1
    assert len(ours.status("two", "run-now")["active"]) == 1


def test_where_a_batch_cannot_be_written_each_object_is_passed_on_its_own(
        db: Database, client: Client, dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """One object must not hold up the others of its batch: the database refuses the
    row of ``poison`` (a trigger), so the batch's insert of every new row fails; each
    object is then passed as before batches, and only ``poison`` waits for a retry."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"""
            CREATE FUNCTION {db.schema}.poison() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.name LIKE '%/poison' THEN RAISE EXCEPTION 'poisoned'; END IF;
                RETURN NEW;
            END $$;
            CREATE TRIGGER poison BEFORE INSERT ON {db.schema}.schedules
                FOR EACH ROW EXECUTE FUNCTION {db.schema}.poison()""")
    ours = operator(db, monkeypatch)
    queue = ours.loop.queues[ours.kind.name]
    names = ["a", "b", "poison", "c"]
    queue.batch = len(names)
    for uid in ours.cache(*(schedule("ns", name) for name in names)):
        queue.submit(uid, "create")
    assert queue.run_once() == len(names)
    ours.write()
    assert sorted(r.name for r in client.schedules.list()) == ["ns/a", "ns/b", "ns/c"]
    assert [(n, reason) for _, n, reason, _ in ours.posted] == [
        ("a", "Created"), ("b", "Created"), ("c", "Created")]
    assert queue.pending() == 1  # poison, taken again later


def test_a_batch_of_new_schedules_logs_one_line_not_one_per_schedule(
        db: Database, client: Client, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """At a start with 10,000 JobSchedules, 12.5% of the start's samples waited for the
    logging handler's lock: each pass of a batch logged its "created schedule" line
    (docs/benchmarks.md, "Scale (issue 31)"). A batch says it once, with the count; each
    schedule's line is DEBUG. A pass outside a batch (the resync loop's) still says it."""
    ours = operator(db, monkeypatch)
    with caplog.at_level(logging.DEBUG, logger="jobwarden"):
        ours.batch(*(schedule("ns", f"s{i}") for i in range(40)))
    said = [r for r in caplog.records if r.name.startswith("jobwarden")]
    info = [r.getMessage() for r in said if r.levelno >= logging.INFO]
    assert info == ["a batch of 40 schedule(s): 40 created [create]"]
    assert len([r for r in said if r.levelno == logging.DEBUG
                and r.getMessage().startswith("created schedule ns/")]) == 40
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="jobwarden"):
        ours.one_by_one(schedule("one", "a"), schedule("ns", "s0", cron="0 4 1 1 *",
                                                        generation=2))
    assert [r.getMessage().split(" (")[0] for r in caplog.records
            if r.name.startswith("jobwarden")] == ["created schedule one/a",
                                                   "updated schedule ns/s0"]
    assert [reason for *_, reason, _ in ours.posted] == ["Created"] * 41 + ["Updated"]


def test_a_batch_parses_each_spec_once(db: Database, client: Client,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch parses (and validates) every spec to know its row; its pass starts from
    that parse when the spec is still the same, and parses a changed one again."""
    ours = operator(db, monkeypatch)
    parsed: list[str] = []
    parse = specs.parse_job_schedule

    def counted(spec: Any, **options: Any) -> specs.JobScheduleSpec:
        parsed.append(str(options["row_name"]))
        return parse(spec, **options)
    monkeypatch.setattr(specs, "parse_job_schedule", counted)
    ours.batch(*(schedule("ns", f"s{i}") for i in range(40)))
    assert sorted(parsed) == sorted(f"ns/s{i}" for i in range(40))
    # Changed between the batch and its pass: the pass parses the spec it passes.
    parsed.clear()
    reconciler = ours.kind.reconciler
    assert isinstance(reconciler, schedules.ScheduleReconciler)
    [uid] = ours.cache(schedule("ns", "s0", cron="0 4 1 1 *", generation=2))
    with reconciler.batch([schedule("ns", "s0", cron="0 5 1 1 *", generation=3)]):
        assert ours.loop.reconcile(ours.kind, uid, trigger="update", by_resync=False)
    ours.write()
    assert parsed == ["ns/s0", "ns/s0"]
    assert client.schedules.get("ns/s0").cron == "0 4 1 1 *"  # type: ignore[union-attr]
    assert ours.posted[-1][2] == "Updated"


def test_the_resync_loop_does_not_pass_a_schedule_again_for_its_batchs_own_create(
        db: Database, client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pass records the digest it started from; a new schedule's was "no row", and
    its batch's create changed it, so the resync loop passed every new schedule once
    more (9% of the samples of a start with 10,000: docs/benchmarks.md, "Scale (issue
    31)"). The batch reads the digests of the rows it created before the rows its passes
    start from, and the passes record those: a row changed after that is passed."""
    ours = operator(db, monkeypatch)
    ours.loop._listed_at[ours.kind.name] = float("inf")  # no verification LIST here
    ours.loop._swept_at = float("inf")
    passed: list[str] = []
    reconciler = ours.kind.reconciler
    reconcile = reconciler.reconcile

    def counted(*, body: kopf.Body, patch: kopf.Patch, trigger: str) -> object:
        passed.append(f"{body['metadata']['name']} {trigger}")
        return reconcile(body=body, patch=patch, trigger=trigger)
    monkeypatch.setattr(reconciler, "reconcile", counted)
    ours.batch(*(schedule("ns", f"s{i}") for i in range(20)))
    assert len(passed) == 20
    passed.clear()

    def due() -> None:
        for key in list(ours.loop._due):
            ours.loop._due[key] = 0.0
    ours.loop.run_once()  # first sight
    due()
    ours.loop.run_once()
    assert passed == []
    client.schedules.suspend("ns/s3")  # a change after the batch: passed
    due()
    ours.loop.run_once()
    assert passed == ["s3 resync"]
    conditions = {c["type"]: c["status"] for c in ours.status("ns", "s3")["conditions"]}
    assert conditions["Suspended"] == "True"

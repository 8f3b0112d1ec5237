"""The operator answers for the schedule rows it wrote (docs/schedules.md, "Rows whose
owner is gone"): it renews its confirmation while it runs; when it returns after the
runners suspended its rows, it deletes those whose JobSchedule went meanwhile and
resumes the others. The real `jobwarden operator`, the emulated API, PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable

from jobwarden.api.client import Client
from jobwarden.schedules import runner
from jobwarden.structs.schedules import OWNER_ABSENT
from tests.operator.conftest import OperatorProcess
from tests.support.kube import KubeAPI, Kubectl
from tests.support.waiting import wait_for

SCHEDULE = """
apiVersion: jobwarden.io/v1alpha1
kind: JobSchedule
metadata: {{name: {name}}}
spec:
  schedule: "0 3 * * *"
  job: {{class: "tests.support.testjobs:Noop"}}
"""


def held(client: Client, name: str) -> bool:
    row = client.schedules.get(name)
    return row is not None and row.suspended_by == OWNER_ABSENT


def test_a_returning_operator_deletes_what_went_and_resumes_the_rest(
        kube_api: KubeAPI, kubectl: Kubectl, client: Client,
        start_operator: Callable[..., OperatorProcess]) -> None:
    operator = start_operator(kube_api, JOBWARDEN_OWNER_GRACE_SECONDS="30")
    kubectl.apply(SCHEDULE.format(name="alive"))
    kubectl.apply(SCHEDULE.format(name="gone"))
    for name in ("default/alive", "default/gone"):
        wait_for(lambda n=name: client.schedules.get(n), timeout=30, message=f"row {name}")
    owner = wait_for(lambda: [o for o in client.schedules.owners() if o.fresh], timeout=30,
                     message="the operator's confirmation")
    assert [(o.source, o.namespace, o.grace_seconds) for o in owner] == [
        ("kubernetes:default", "", 30)]

    # The operator goes; one JobSchedule is deleted while none runs; the grace passes.
    assert operator.stop() == 0
    kubectl("delete", "js", "gone")
    db = client.db
    with db.connection() as conn:
        conn.execute("UPDATE jobwarden.schedule_owners SET renewed_at = now() - interval "
                     "'31 seconds'")
        conn.execute("UPDATE jobwarden.schedules SET next_slot = now() - interval '1 second'")
        conn.commit()
    runner.enqueue_due(db)  # any runner, e.g. a worker's
    assert held(client, "default/alive") and held(client, "default/gone")

    start_operator(kube_api, JOBWARDEN_OWNER_GRACE_SECONDS="30")
    wait_for(lambda: client.schedules.get("default/gone") is None, timeout=30,
             message="the row of the deleted JobSchedule swept")
    alive = wait_for(lambda: (r := client.schedules.get("default/alive")) is not None
                     and not r.suspended and r, timeout=30, message="the other resumed")
    assert alive.source == "kubernetes:default"
    wait_for(lambda: all(o.fresh for o in client.schedules.owners()), timeout=30,
             message="confirmed again")

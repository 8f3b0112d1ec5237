"""Pod runs, run side: the operator's claim of a pod run, a failed pod's outcome,
and the running pod runs (docs/podruns.md).

A job whose ``pod_run`` is set (a ``JobSchedule`` or ``ExclusiveJob`` with a pod
template) is never claimed by a worker. The operator claims it with
:func:`claim_pod_runs` -- fenced, attempt counted, the row's lease taken at once
with the same busy rules as a worker's (:mod:`jobwarden.coordination.onbusy`) -- creates one
pod per claim, and hands the pod the claim's id and tokens. The pod runs
``jobwarden run-job`` (:mod:`jobwarden.podruns.runjob`, not imported here: the
operator never loads the worker), which heartbeats, renews the lease and records
the outcome under that claim. A pod that ends without an outcome is reported
with :func:`fail_pod_run` and the dead-worker rules apply.

Only plain data and the database cross this API; it imports nothing of the
worker, so the controller may use it.
"""

from __future__ import annotations

from jobwarden.podruns.claiming import claim_pod_runs
from jobwarden.podruns.failing import fail_pod_run, running_pod_runs
from jobwarden.structs.podruns import (
    POD_FAILURE_CAUSES,
    POD_RUN_KINDS,
    PodClaimBatch,
    PodFailureCause,
    PodRunClaim,
    RunningPodRun,
    pod_run_problem,
    pod_run_ref,
)

__all__ = ["POD_FAILURE_CAUSES", "POD_RUN_KINDS", "PodClaimBatch", "PodFailureCause",
           "PodRunClaim", "RunningPodRun", "claim_pod_runs", "fail_pod_run", "pod_run_problem",
           "pod_run_ref", "running_pod_runs"]

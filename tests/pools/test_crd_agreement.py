"""crds/ and the WorkerPool reconciler agree on every field it reads and writes."""

from __future__ import annotations

from jobwarden.controller.workerpools import reconciler as pools
from jobwarden.controller.workerpools import rollout
from jobwarden.controller.workerpools import spec as pools_spec
from tests.operator.test_crd_agreement import crd_schema, has_path, leaf_paths


def test_every_spec_field_the_reconciler_reads_is_in_the_crd_and_every_crd_field_is_read():
    spec = crd_schema("WorkerPool")["properties"]["spec"]
    for field in pools_spec.POOL_FIELDS:
        assert has_path(spec, field), f"spec.{field} is not in the WorkerPool CRD"
    # spec.template, spec.resources and spec.env are Kubernetes' own schemas (generated),
    # passed through whole to the worker container.
    assert {p for p in leaf_paths(spec)
            if not p.startswith(("template.", "resources.", "env."))} <= \
        set(pools_spec.POOL_FIELDS)


def test_every_status_field_the_reconciler_writes_is_in_the_crd():
    status = crd_schema("WorkerPool")["properties"]["status"]
    for key in pools.POOL_KEYS:
        assert has_path(status, key), f"status.{key} is not in the WorkerPool CRD"
    summary = rollout.decide(rollout.Desired(replicas=1, template_hash="h", max_surge=1,
                                             max_unavailable=0, drain_timeout=1), [], {},
                             now=0).summary
    condition_types = {c["type"] for c in rollout.conditions_of(summary, replicas=1)}
    description = status["properties"]["conditions"]["items"]["properties"]["type"]
    assert all(kind in description["description"] for kind in condition_types)

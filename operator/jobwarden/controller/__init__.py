"""The Kubernetes side of Jobwarden: a kopf operator (``jobwarden operator``).

The only package allowed to import kopf or the Kubernetes client (checked by
tests/unit/test_layering.py). One package per resource kind, one for what the
kinds share:

``jobschedules/``   JobSchedule: row <-> resource, its status, per-run Events
``exclusivejobs/``  ExclusiveJob: job row <-> resource, its status
``workerpools/``    WorkerPool: spec -> pod template, rollout and status decisions
``podruns/``        pod runs, operator side: run pods, their fates, the pass
``kube/``           the API client, the one pod adapter, cache, Events, conditions

and the operator process itself:

``config``          settings from the environment the Helm chart sets
``specs``           typed, pure parsing of JobSchedule / ExclusiveJob specs
``runtime``         what the handlers of one operator instance share
``handlers``        the kopf wiring every kind shares (cache, changes, the pod watch)
``resyncing``       the resync loop: time-driven passes of every cached object
``periodic``        schedule runner, reaper, gauges, each under a database lease
``app``             kopf settings, registry, HTTP, process lifecycle
"""

"""The Kubernetes side of Jobwarden: a kopf operator (``jobwarden operator``).

The only package allowed to import kopf or the Kubernetes client (checked by
tests/unit/test_layering.py). One module per concern:

``config``          settings from the environment the Helm chart sets
``specs``           typed, pure parsing of JobSchedule / ExclusiveJob specs
``status``          pure decisions: conditions, phases, status patches, Events
``schedules``       JobSchedule handlers (row <-> resource)
``exclusive_jobs``  ExclusiveJob handlers (job row <-> resource)
``periodic``        schedule runner, reaper, gauges, each under a database lease
``events``          posting Kubernetes Events through kopf
``runtime``         what the handlers of one operator instance share
``app``             kopf settings, registry, HTTP, process lifecycle

WorkerPool reconciliation (worker pods, drain-first rollouts) is added as a
``pools`` module registered in ``app.RESOURCE_MODULES``.
"""

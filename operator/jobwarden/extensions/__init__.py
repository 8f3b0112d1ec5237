"""The worker extensions, one module per feature, named as the feature's own module.

``extensions.hosts`` is the worker's side of :mod:`jobwarden.coordination.hosts`,
``extensions.exclusive`` of exclusive jobs (:mod:`jobwarden.coordination.leases`),
``extensions.gauges`` of :mod:`jobwarden.maintenance.gauges`,
``extensions.retention`` of :mod:`jobwarden.maintenance.retention` and
``extensions.tracing`` of :mod:`jobwarden.observability.tracing`. Apart from their
features so the client and the operator, which use the features too, import
nothing of the worker; :mod:`jobwarden.assembly` is the one place that adds them.
"""

"""Periodic duties each database needs done by one process: reap, retain, export gauges.

``looping`` runs periodic work the same way in a worker and in the operator,
each duty under the lease one process holds for it (``looping.LoopLease``);
``reaper`` reclaims claims whose heartbeats stopped; ``retention`` deletes
finished jobs; ``gauges`` exports the database-wide gauges.
The worker's sides of these are in :mod:`jobwarden.extensions`.
"""

"""The database layer: the only part of Jobwarden that imports psycopg.

Everything above it (client, worker, leases, schedules, hosts, operator) calls
table-first operations on :class:`jobwarden.db.database.Database` and receives
dataclasses from :mod:`jobwarden.structs`. Keeping the driver behind this one
boundary keeps SQL in one place per concept and lets the layering be checked by
a test (``tests/unit/test_layering.py``).
"""

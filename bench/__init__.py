"""Benchmark harness: Jobwarden against its Python peers on one PostgreSQL.

Kept outside the package on purpose: it depends on the peers (procrastinate,
pgqueuer) through the ``bench`` extra, which the engine itself must never need.
Run it with ``python -m bench``; see ``docs/benchmarks.md``.
"""

"""How a job is defined: ``jobwarden.Job``, ``@jobwarden.job`` and typed job data.

Below the worker (which runs these definitions) and the client (which enqueues
them): a job module imports only this, so ``import jobwarden`` in a worker costs
what these modules cost (docs/benchmarks.md, "Idle worker RSS").
"""

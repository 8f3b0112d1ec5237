"""The Jobwarden console: a browser view of jobs, queues, schedules, leases and hosts.

An ASGI app (Starlette) rendering server-side Jinja2 templates (autoescaped)
over the same :class:`jobwarden.api.client.Client` calls the CLI makes. It runs
only when started (``jobwarden console``); see docs/console.md for its security
model (auth unless bound to loopback, read-only mode, CSRF on every action, no
job data in logs).
"""

"""``JobSchedule``: one schedule row per resource, its ``.status`` and per-run Events.
"""

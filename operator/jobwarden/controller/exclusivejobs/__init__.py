"""``ExclusiveJob``: one job row per resource generation under its lease, and its ``.status``.
"""

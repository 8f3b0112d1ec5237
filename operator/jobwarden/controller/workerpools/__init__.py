"""``WorkerPool``: worker pods rendered from the spec, scaled and rolled out drain-first.
"""

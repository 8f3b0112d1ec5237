"""Pod runs, operator side: claim, create, watch, judge, replace and prune run pods
(the database half is :mod:`jobwarden.podruns`; the pod's process is ``jobwarden run-job``).
"""

"""Who may run what, cluster-wide: leases, the host registry, and what a busy lease does.

``leases`` is the lock API (``client.lease``, ``jobwarden.Lease``), the lease
holder everything else shares and the lease an exclusive attempt holds
(``JobLease``); ``onbusy`` what a claimed run does when its lease is busy;
``hosts`` the registry of hosts and drains. The worker's sides of these are in
:mod:`jobwarden.extensions`.
"""

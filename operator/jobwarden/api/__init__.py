"""What applications call: ``Client``, ``AsyncClient`` and the operations both drive.

``operations`` holds every rule of the client API once (plans, validation);
``client`` and ``asyncclient`` only drive its plans with blocking or asyncio I/O.
Import them from the package root (``jobwarden.Client``, ``jobwarden.AsyncClient``):
this package imports nothing on its own, so a worker pays for none of it.
"""

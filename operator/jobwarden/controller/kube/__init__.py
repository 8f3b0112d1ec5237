"""Shared Kubernetes machinery every kind uses.

``client``            the operator's API client; ``api_reason`` of a refused call
``pods``              the one pod adapter (worker pods, run pods, budgets, Secret keys)
``podstate``          a Pod's container states and timestamps, read (pure)
``caching``           the watch-fed cache of every watched object
``events``            Events: through kopf, or directly outside its handlers
``status``            conditions, status patches, Events from transitions (pure)
``kinds``             what the operator knows about each kind it reconciles
``resource_metrics``  per-resource series read from the watch
``secretchecks``      does a DSN Secret (and its key) exist, asked once a minute
"""

"""Plain data shared between the layers: no I/O, no psycopg, no kopf."""

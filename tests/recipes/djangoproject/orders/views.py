"""Where the application enqueues: inside transaction.atomic, on Django's connection."""

from django.db import connection, transaction
from orders import jobs

import jobwarden

client = jobwarden.Client()  # JOBWARDEN_DSN; one per process


def place_order(order_id: int, *, fail: bool = False) -> int:
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("INSERT INTO orders (id) VALUES (%s)", [order_id])
        job = client.enqueue(jobs.send_receipt, {"order_id": order_id}, conn=connection)
        if fail:
            raise RuntimeError("payment declined")  # the order and its job roll back
    return job.id

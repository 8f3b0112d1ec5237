"""The app's jobs. They run inside Django (the worker is a management command)."""

from django.db import connection

import jobwarden


@jobwarden.job(max_retries=0)
def send_receipt(order_id: int) -> str:
    with connection.cursor() as cursor:
        cursor.execute("UPDATE orders SET receipt_sent = true WHERE id = %s", [order_id])
    return f"receipt for order {order_id}"

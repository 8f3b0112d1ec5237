from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from orders import views


class Command(BaseCommand):
    help = "Place an order (and enqueue its receipt) in one transaction."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("order_id", type=int)
        parser.add_argument("--fail", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            self.stdout.write(str(views.place_order(options["order_id"], fail=options["fail"])))
        except RuntimeError as exc:
            self.stderr.write(str(exc))

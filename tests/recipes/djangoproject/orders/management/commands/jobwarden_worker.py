from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from jobwarden import cli


class Command(BaseCommand):
    help = "Run a Jobwarden worker inside this Django project (jobs can use the ORM)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("worker_args", nargs="*", help="passed to `jobwarden worker`")

    def handle(self, *args: Any, **options: Any) -> None:
        code = cli.main(["worker", "--app", "orders.jobs", *options["worker_args"]])
        if code:
            raise CommandError(f"worker exited with {code}", returncode=code)

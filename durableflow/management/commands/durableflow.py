"""``manage.py durableflow prune --older-than 30d``: operations on durableflow's tables."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from durableflow import operations


class Command(BaseCommand):
    help = "Operate on durableflow's executions (prune)."

    def add_arguments(self, parser: CommandParser) -> None:
        commands = parser.add_subparsers(dest="command", required=True, metavar="command")
        prune = commands.add_parser(
            "prune",
            help="Delete executions that finished longer ago than --older-than, with their journals.",
            description="Delete executions that finished longer ago than --older-than, with their journals, "
            "waiters, signals and watches, in batches of one transaction each. Unfinished executions, "
            "finished ones that an unfinished one waits for, stores and published events are kept.",
        )
        prune.add_argument(
            "--older-than",
            required=True,
            help="How long ago they finished: 30d, 12h, 15m, 90s, 2w, or an ISO 8601 duration (P30D).",
        )
        prune.add_argument("--batch", type=int, default=1000, help="Executions deleted per transaction (1000).")

    def handle(self, *args, command: str, older_than: str, batch: int, **options) -> None:
        try:
            age = operations.parse_age(older_than)
            if batch < 1:
                raise ValueError(f"--batch must be at least 1; got {batch}")
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        deleted = operations.prune(age, batch=batch)
        self.stdout.write(
            f"deleted {deleted} execution{'' if deleted == 1 else 's'} that finished more than {older_than} ago"
        )

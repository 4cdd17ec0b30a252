"""``manage.py durableflow prune --older-than 30d`` and ``manage.py durableflow status [--json]``:
operations on durableflow's tables."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError, CommandParser

from durableflow import monitoring, operations


class Command(BaseCommand):
    help = "Operate on durableflow's executions (prune, status)."

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
        status = commands.add_parser(
            "status",
            help="Counts by status and workflow, the sweep's backlog and last run, the oldest late executions.",
            description="Counts of executions by status and by workflow; the sweep's backlog (due, overdue, "
            "expired leases, stale, past their deadline, stalled) with the oldest executions of each; the "
            "oldest waiting ones; and when the sweep last ran, which tells whether beat is running. "
            "Times are the database's clock. Reads only.",
        )
        status.add_argument("--json", action="store_true", help="Print the report as one JSON object.")

    def handle(self, *args, command: str, **options) -> None:
        if command == "status":
            self._status(as_json=options["json"])
        else:
            self._prune(options["older_than"], options["batch"])

    def _status(self, *, as_json: bool) -> None:
        report = monitoring.status()
        if as_json:
            self.stdout.write(json.dumps(monitoring.as_json(report), indent=2))
        else:
            self.stdout.write(monitoring.render(report), ending="")

    def _prune(self, older_than: str, batch: int) -> None:
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

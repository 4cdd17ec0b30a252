"""``manage.py durableflow <command>``: operations on durableflow's tables.

``prune --older-than 30d``; ``replay-check`` (the deploy gate: would the code installed here
replay the stored journals, or stall them?); ``export <id>`` (an execution and its journal as
JSON, for ``durableflow.testing.replay``).
"""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError, CommandParser

from durableflow import exceptions, operations


class Command(BaseCommand):
    help = "Operate on durableflow's executions (prune, replay-check, export)."

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

        check = commands.add_parser(
            "replay-check",
            help="Replay stored journals against the code installed here; exit 1 if any would stall.",
            description="Replay the journals of unfinished executions (newest first) against the workflow code "
            "this process has, in memory: nothing runs live and nothing is written. Prints the executions that "
            "would stall (or run a new step before steps they already recorded) with the step where each "
            "diverges, and exits 1 if there is any: run it in CI before a deploy, with the new code installed "
            "and the production database (or a replica, or a read-only role) configured.",
        )
        check.add_argument("--workflow", help="Only executions of this workflow.")
        check.add_argument("--last", type=int, help="Only the newest N executions.")
        check.add_argument(
            "--since", help="Only executions created since then: an ISO 8601 date or time, or an age (7d, 12h)."
        )
        check.add_argument("--finished", action="store_true", help="Finished executions too.")
        check.add_argument("--json", action="store_true", help="One JSON object: every execution checked.")

        export = commands.add_parser(
            "export",
            help="Write an execution and its journal as JSON (for durableflow.testing.replay).",
            description="Write the execution's row and its journal as one JSON object to standard output: "
            "durableflow.testing.replay() replays it against the code installed in a test, without a database.",
        )
        export.add_argument("execution_id", help="The execution's id.")

    def handle(self, *args, command: str, **options) -> None:
        if command == "prune":
            self.handle_prune(options["older_than"], options["batch"])
        elif command == "replay-check":
            chosen = {name: options[name] for name in ("workflow", "last", "since", "finished")}
            self.handle_replay_check(**chosen, as_json=options["json"])
        else:
            self.handle_export(options["execution_id"])

    def handle_prune(self, older_than: str, batch: int) -> None:
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

    def handle_replay_check(self, *, workflow, last, since, finished, as_json: bool) -> None:
        try:
            if last is not None and last < 1:
                raise ValueError(f"--last must be at least 1; got {last}")
            if since is not None:
                since = operations.parse_since(since)
            verdicts = list(operations.replay_check(workflow=workflow, last=last, since=since, finished=finished))
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        diverging = [verdict for verdict in verdicts if not verdict.ok]
        if as_json:
            self.stdout.write(_json({"checked": len(verdicts), "diverging": [v.as_dict() for v in diverging]}))
        else:
            for verdict in diverging:
                at = f" at step {verdict.step!r}" if verdict.step else ""
                self.stdout.write(
                    f"{verdict.execution_id} {verdict.workflow} version {verdict.version} ({verdict.status}): "
                    f"{verdict.code}{at}: {verdict.message}"
                )
            self.stdout.write(
                f"{len(verdicts)} execution{'' if len(verdicts) == 1 else 's'} checked, "
                f"{len(diverging)} would not replay"
            )
        if diverging:
            raise SystemExit(1)

    def handle_export(self, execution_id: str) -> None:
        try:
            data = operations.export(execution_id)
        except exceptions.ExecutionNotFound as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(_json(data))


def _json(data) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False)

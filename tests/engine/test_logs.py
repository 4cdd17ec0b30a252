"""Structured logs: every record of a ``durableflow.*`` logger carries ``execution_id``,
``workflow`` and ``step_key`` as attributes (None where they do not apply)."""

from __future__ import annotations

import json
import logging

import durableflow
from durableflow import RetryableError
from durableflow.engine import logs

tries: dict[str, int] = {}


def _body(log, tag: str) -> int:
    tries[tag] = tries.get(tag, 0) + 1
    log.info("body try %d", tries[tag])
    if tries[tag] == 1:
        raise RetryableError("not yet", max_attempts=2, retry_interval=1.0)
    return tries[tag]


@durableflow.workflow("logs.flaky")
def flaky(ctx, params):
    return ctx.step.run("flaky", _body, ctx.logger, params["tag"])


def _ours(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "durableflow" or r.name.startswith("durableflow.")]


def test_every_durableflow_logger_has_the_context_filter():
    import durableflow.tasks  # every module of the package that logs
    import durableflow.transport  # noqa: F401 - the import above bound the name already

    loggers = {
        name: found
        for name, found in logging.root.manager.loggerDict.items()
        if isinstance(found, logging.Logger) and (name == "durableflow" or name.startswith("durableflow."))
    }
    assert {"durableflow", "durableflow.delivery", "durableflow.journal"} <= set(loggers)
    missing = [name for name, found in loggers.items() if not any(isinstance(f, logs.ContextFilter) for f in found.filters)]
    assert not missing


def test_a_deliverys_records_carry_the_execution_workflow_and_step(backend, caplog):
    tries.clear()
    with caplog.at_level(logging.INFO, logger="durableflow"):
        execution_id = backend.start("logs.flaky", {"tag": backend.name})
        backend.run(execution_id)
        logging.getLogger("durableflow.delivery").info("after the delivery")

    records = _ours(caplog)
    assert all(hasattr(r, name) for r in records for name in logs.FIELDS)
    failed = next(r for r in records if r.getMessage().startswith("step 'flaky' attempt 1 failed"))
    assert (failed.execution_id, failed.workflow, failed.step_key) == (execution_id, "logs.flaky", "flaky")
    bodies = [r for r in records if r.getMessage().startswith("body try")]
    assert [(r.execution_id, r.workflow, r.step_key) for r in bodies] == [(execution_id, "logs.flaky", "flaky")] * 2
    after = records[-1]
    assert after.getMessage() == "after the delivery"
    assert (after.execution_id, after.workflow, after.step_key) == (None, None, None)


def test_an_extra_given_at_the_call_wins_over_the_scope(caplog):
    log = logs.logger("durableflow.test")
    with caplog.at_level(logging.INFO, logger="durableflow.test"), logs.scope(execution_id="a", workflow="w"):
        log.info("given", extra={"execution_id": "b"})
    (record,) = caplog.records
    assert (record.execution_id, record.workflow, record.step_key) == ("b", "w", None)


def test_the_json_recipe_of_the_operating_guide_writes_one_object_per_record(tmp_path):
    """The guide's ``LOGGING`` recipe, configured as written (its stream swapped for a file)."""
    import logging.config

    from django.conf import settings

    from tests.docs_blocks import blocks

    (recipe,) = [b for b in blocks("how-to/operating.md") if b.title == "settings.py" and "LOGGING" in b.text]
    namespace = {name: getattr(settings, name) for name in dir(settings) if name.isupper()}
    exec(compile(recipe.text, str(recipe), "exec"), namespace)
    config = namespace["LOGGING"]
    # Its formatter as dictConfig makes it (dictConfig itself would close the test run's handlers),
    # on a file handler in place of its stream, on the logger it configures.
    (formatter_name,) = {config["handlers"][name]["formatter"] for name in config["loggers"]["durableflow"]["handlers"]}
    formatter = logging.config.DictConfigurator(config).configure_formatter(dict(config["formatters"][formatter_name]))
    handler = logging.FileHandler(tmp_path / "log")
    handler.setFormatter(formatter)
    logging.getLogger("durableflow").addHandler(handler)
    try:
        with logs.scope(execution_id="x1", workflow="orders"):
            logs.logger("durableflow.delivery").warning("delivered %s", "x1")
        try:
            raise ValueError("boom")
        except ValueError:
            logs.logger("durableflow.delivery").exception("failed")
    finally:
        logging.getLogger("durableflow").removeHandler(handler)
        handler.close()

    first, second = [json.loads(line) for line in (tmp_path / "log").read_text().splitlines()]
    assert {k: first[k] for k in ("level", "logger", "message", "execution_id", "workflow", "step_key")} == {
        "level": "WARNING",
        "logger": "durableflow.delivery",
        "message": "delivered x1",
        "execution_id": "x1",
        "workflow": "orders",
        "step_key": None,
    }
    assert first["time"].endswith("+00:00")
    assert second["execution_id"] is None and "ValueError: boom" in second["exception"]


def test_a_journal_claimed_outside_a_delivery_leaves_the_threads_records_alone(backend):
    execution_id = backend.start("logs.flaky", {"tag": backend.name})
    assert backend.journal(execution_id).claim() is not None
    assert logs.current() == {}


def test_a_message_that_could_not_be_sent_names_its_execution(monkeypatch, caplog):
    from celery import current_app

    from durableflow import dispatch

    def refused(*args, **kwargs):
        raise ConnectionError("broker down")

    monkeypatch.setattr(current_app.amqp, "send_task_message", refused)
    with caplog.at_level(logging.WARNING, logger="durableflow.dispatch"):
        assert dispatch.send(dispatch.DELIVER, ("e1",), "q") is False
        assert dispatch.send(dispatch.RUN_ITEM, ("e2", "items[3]"), "q") is False
        assert dispatch.send(dispatch.SWEEP, (), "q") is False
    assert [(r.execution_id, r.workflow, r.step_key) for r in _ours(caplog)] == [
        ("e1", None, None),
        ("e2", None, "items[3]"),
        (None, None, None),
    ]

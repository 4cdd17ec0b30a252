"""The names of durableflow's Celery tasks: what the verbs ask a storage to send.

The engine owns them (a verb says which task wakes which execution); ``durableflow.dispatch``
sends them and ``durableflow.tasks`` registers a task under each. Settings, system checks and
the demo project use these names too (through ``durableflow.dispatch``).
"""

from __future__ import annotations

__all__ = ["DELIVER", "SWEEP", "RUN_ITEM", "PRUNE", "TICK", "TASKS"]

DELIVER = "durableflow.deliver"  # args: (execution_id,) - one delivery of an execution
SWEEP = "durableflow.sweep"  # no args - wake due executions, re-send lost wake-ups
RUN_ITEM = "durableflow.run_item"  # args: (execution_id, key) - one map item or run(queue=) attempt
PRUNE = "durableflow.prune"  # args: (older_than,) - delete executions finished longer ago ("30d")
TICK = "durableflow.tick"  # kwargs: schedule, workflow, params, catch_up - a schedule's tick (beat sends it)

TASKS = (DELIVER, SWEEP, RUN_ITEM, PRUNE, TICK)

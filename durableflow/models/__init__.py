"""durableflow's models, one module per capability.

The database is the source of truth: a Celery message only says "look at execution X".
"""

from durableflow.models.executions import Execution, StepRecord
from durableflow.models.waits import Event, Waiter

__all__ = ["Execution", "StepRecord", "Event", "Waiter"]

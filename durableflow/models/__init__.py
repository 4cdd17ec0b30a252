"""durableflow's models, one module per capability.

The database is the source of truth: a Celery message only says "look at execution X".
"""

from durableflow.models.documents import WorkflowDocument
from durableflow.models.effects import Effect, EffectWatch
from durableflow.models.executions import Execution, StepRecord
from durableflow.models.ratelimits import RateLimitAdmission
from durableflow.models.stores import Store, StoreLedger, StoreWaiter
from durableflow.models.streams import StreamChunk
from durableflow.models.sweeps import SweepRun
from durableflow.models.waits import Event, Waiter

__all__ = [
    "Execution",
    "StepRecord",
    "Effect",
    "EffectWatch",
    "Store",
    "StoreLedger",
    "StoreWaiter",
    "StreamChunk",
    "Event",
    "Waiter",
    "WorkflowDocument",
    "RateLimitAdmission",
    "SweepRun",
]

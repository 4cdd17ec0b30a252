"""The ORM storage: the storage protocol on durableflow's models, in the project's database.

``OrmStorage`` is assembled from one part per capability; each implements its share of
``durableflow.engine.storage.Storage`` on that capability's models.
"""

from __future__ import annotations

from durableflow.orm.core import OrmCore, db_alias
from durableflow.orm.effects import OrmEffects
from durableflow.orm.items import OrmItems
from durableflow.orm.ratelimits import OrmRateLimits
from durableflow.orm.sagas import OrmSagas
from durableflow.orm.slots import OrmSlots
from durableflow.orm.stores import OrmStores
from durableflow.orm.streams import OrmStreams
from durableflow.orm.transactions import OrmTransactions
from durableflow.orm.waits import OrmWaits

__all__ = ["OrmStorage", "db_alias"]


class OrmStorage(
    OrmRateLimits, OrmSlots, OrmSagas, OrmEffects, OrmStores, OrmStreams, OrmWaits, OrmItems, OrmTransactions, OrmCore
):
    """The storage protocol on the models, on the alias the project's routers choose."""

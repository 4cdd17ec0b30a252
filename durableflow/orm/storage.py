"""``OrmStorage``: the ORM storage's parts, one per capability, assembled."""

from __future__ import annotations

from typing import TYPE_CHECKING

from durableflow.engine.storage import Storage
from durableflow.orm.core import OrmCore
from durableflow.orm.effects import OrmEffects
from durableflow.orm.items import OrmItems
from durableflow.orm.ratelimits import OrmRateLimits
from durableflow.orm.sagas import OrmSagas
from durableflow.orm.slots import OrmSlots
from durableflow.orm.stores import OrmStores
from durableflow.orm.streams import OrmStreams
from durableflow.orm.transactions import OrmTransactions
from durableflow.orm.waits import OrmWaits

__all__ = ["OrmStorage"]


class OrmStorage(
    OrmRateLimits, OrmSlots, OrmSagas, OrmEffects, OrmStores, OrmStreams, OrmWaits, OrmItems, OrmTransactions, OrmCore
):
    """The storage protocol on the models, on the alias the project's routers choose."""


if TYPE_CHECKING:

    def _implements(storage: OrmStorage) -> Storage:
        return storage  # the type checker holds OrmStorage to the protocol here

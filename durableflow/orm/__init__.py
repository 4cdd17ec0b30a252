"""The ORM storage: the storage protocol on durableflow's models, in the project's database.

``OrmStorage`` is assembled from one part per capability; each implements its share of
``durableflow.engine.storage.Storage`` on that capability's models.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from durableflow.orm.core import db_alias
    from durableflow.orm.storage import OrmStorage

__all__ = ["OrmStorage", "db_alias"]


def __getattr__(name: str) -> Any:
    # Loaded on first use: the models import this package's SQL helpers (``predicates``) while
    # the storage's parts import the models.
    if name == "OrmStorage":
        from durableflow.orm.storage import OrmStorage

        return OrmStorage
    if name == "db_alias":
        from durableflow.orm.core import db_alias

        return db_alias
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

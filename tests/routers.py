"""A router that keeps durableflow's tables in their own database alias (``durableflow``)."""

ALIAS = "durableflow"


class DurableflowRouter:
    def db_for_read(self, model, **hints):
        return ALIAS if model._meta.app_label == "durableflow" else None

    db_for_write = db_for_read

    def allow_relation(self, obj1, obj2, **hints):
        return None

    def allow_migrate(self, db, app_label, model_name=None, **hints):
        if app_label == "durableflow":
            return db == ALIAS
        return db != ALIAS

"""On PostgreSQL, the transaction that finishes an execution notifies ``durableflow_finished``.

A trigger, so that every way an execution ends (a delivery's outcome, a cancel, a
compensation, the admin) notifies, and only once it commits: ``pg_notify`` inside a
transaction is delivered at its commit and never after a rollback. The payload is the id.
``durableflow.orm.waiting`` listens. Other databases have nothing to install.
"""

from django.db import migrations

TERMINAL = ("completed", "failed", "cancelled", "compensated", "compensation_failed")

# The trigger's function, payload the id (``0011_finish_notice`` replaces it, and restores this).
FUNCTION = """
    CREATE OR REPLACE FUNCTION durableflow_notify_finished() RETURNS trigger AS $$
    BEGIN
        PERFORM pg_notify('durableflow_finished', NEW.id);
        RETURN NULL;
    END
    $$ LANGUAGE plpgsql
    """


def _table(apps):
    return apps.get_model("durableflow", "Execution")._meta.db_table


def install(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    table = schema_editor.quote_name(_table(apps))
    statuses = ", ".join(f"'{status}'" for status in TERMINAL)
    schema_editor.execute(FUNCTION)
    schema_editor.execute(
        f"""
        CREATE TRIGGER durableflow_execution_finished
        AFTER UPDATE OF status ON {table}
        FOR EACH ROW
        WHEN (NEW.status IN ({statuses}) AND OLD.status IS DISTINCT FROM NEW.status)
        EXECUTE FUNCTION durableflow_notify_finished()
        """
    )


def remove(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(
        f"DROP TRIGGER IF EXISTS durableflow_execution_finished ON {schema_editor.quote_name(_table(apps))}"
    )
    schema_editor.execute("DROP FUNCTION IF EXISTS durableflow_notify_finished()")


class Migration(migrations.Migration):
    dependencies = [("durableflow", "0008_sagas")]

    operations = [migrations.RunPython(install, remove, elidable=False)]

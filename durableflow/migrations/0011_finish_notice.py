"""The finishing transaction's notification carries the outcome, not only the id.

``durableflow_finished``'s payload becomes a JSON object with the execution's ``id``,
``status``, ``result``, ``error`` and ``continued_as`` as they are committed, so that a woken
``result()`` answers without reading the row again. PostgreSQL refuses a payload of 8,000 bytes
or more: an outcome that large is announced as ``{"id": ...}`` alone, and its callers read it.
The trigger itself (which statuses notify) is migration ``0009_finish_notify``'s.
"""

from importlib import import_module

from django.db import migrations

# The payload's members: the fields a caller of result() needs (``OUTCOME_FIELDS``).
FIELDS = ("id", "status", "result", "error", "continued_as")
MAX_PAYLOAD = 8000  # bytes, exclusive (PostgreSQL's limit on a notification payload)


def _notice_function(apps, schema_editor) -> str:
    Execution = apps.get_model("durableflow", "Execution")
    members = ", ".join(
        f"'{name}', NEW.{schema_editor.quote_name(Execution._meta.get_field(name).column)}" for name in FIELDS
    )
    id_column = schema_editor.quote_name(Execution._meta.get_field("id").column)
    return f"""
        CREATE OR REPLACE FUNCTION durableflow_notify_finished() RETURNS trigger AS $$
        DECLARE
            notice text := json_build_object({members})::text;
        BEGIN
            IF octet_length(notice) >= {MAX_PAYLOAD} THEN
                notice := json_build_object('id', NEW.{id_column})::text;
            END IF;
            PERFORM pg_notify('durableflow_finished', notice);
            RETURN NULL;
        END
        $$ LANGUAGE plpgsql
        """


def install(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(_notice_function(apps, schema_editor))


def remove(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(import_module("durableflow.migrations.0009_finish_notify").FUNCTION)


class Migration(migrations.Migration):
    dependencies = [("durableflow", "0010_lineage_indexes")]

    operations = [migrations.RunPython(install, remove, elidable=False)]

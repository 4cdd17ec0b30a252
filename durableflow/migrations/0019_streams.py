"""Stream chunks, and on PostgreSQL the notification that wakes their readers.

Each committed chunk notifies ``durableflow_stream`` with its execution's id (a trigger, so that
it is sent only if the insert commits: ``pg_notify`` in a transaction is delivered at its commit,
never after a rollback). ``durableflow.orm.waiting`` listens. Other databases have nothing to install.
"""

import django.db.models.deletion
from django.db import migrations, models


FUNCTION = """
    CREATE OR REPLACE FUNCTION durableflow_notify_chunk() RETURNS trigger AS $$
    BEGIN
        PERFORM pg_notify('durableflow_stream', NEW.{execution});
        RETURN NULL;
    END
    $$ LANGUAGE plpgsql
    """


def _table(apps):
    return apps.get_model("durableflow", "StreamChunk")._meta


def install(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    meta, qn = _table(apps), schema_editor.quote_name
    schema_editor.execute(FUNCTION.format(execution=qn(meta.get_field("execution").column)))
    schema_editor.execute(
        f"CREATE TRIGGER durableflow_chunk_written AFTER INSERT ON {qn(meta.db_table)} "
        "FOR EACH ROW EXECUTE FUNCTION durableflow_notify_chunk()"
    )


def remove(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    table = schema_editor.quote_name(_table(apps).db_table)
    schema_editor.execute(f"DROP TRIGGER IF EXISTS durableflow_chunk_written ON {table}")
    schema_editor.execute("DROP FUNCTION IF EXISTS durableflow_notify_chunk()")


class Migration(migrations.Migration):

    dependencies = [
        ('durableflow', '0018_trace_context'),
    ]

    operations = [
        migrations.CreateModel(
            name='StreamChunk',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('stream_id', models.CharField(max_length=200)),
                ('seq', models.PositiveIntegerField()),
                ('chunk', models.JSONField(blank=True, null=True)),
                ('at', models.DateTimeField()),
                ('execution', models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='chunks', to='durableflow.execution')),
            ],
            options={
                'ordering': ['id'],
                'constraints': [models.UniqueConstraint(fields=('execution', 'stream_id', 'seq'), name='durableflow_chunk_once')],
            },
        ),
        migrations.RunPython(install, remove, elidable=False),
    ]

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("durableflow", "0019_streams"),
    ]

    operations = [
        migrations.AddField(
            model_name="waiter",
            name="settles",
            field=models.BooleanField(db_default=False, default=False),
        ),
    ]

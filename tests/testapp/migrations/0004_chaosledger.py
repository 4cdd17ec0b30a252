from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("testapp", "0003_txsteps"),
    ]

    operations = [
        migrations.CreateModel(
            name="ChaosLedger",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("nonce", models.CharField(max_length=32, unique=True)),
                ("execution_id", models.CharField(db_index=True, max_length=200)),
                ("step", models.CharField(max_length=255)),
                ("kind", models.CharField(max_length=16)),
                ("pid", models.IntegerField()),
                ("at", models.DateTimeField()),
            ],
        ),
    ]

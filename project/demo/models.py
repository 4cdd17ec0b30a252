from django.db import models


class FakeCharge(models.Model):
    """A charge as the fake payment provider (``project.demo.payments``) keeps it."""

    idempotency_key = models.CharField(max_length=200, unique=True)
    cents = models.PositiveIntegerField()
    calls = models.PositiveIntegerField(default=1, help_text="How many charge requests named this key.")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return f"ch_{self.pk} ({self.cents} cents)"

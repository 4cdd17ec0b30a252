from django.db import models


class Marker(models.Model):
    """Written by step bodies in worker processes, so that tests can count what ran, and where."""

    name = models.CharField(max_length=255, db_index=True)
    pid = models.IntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    @classmethod
    def hit(cls, name: str) -> int:
        import os

        cls.objects.create(name=name, pid=os.getpid())
        return os.getpid()

    @classmethod
    def count(cls, name: str) -> int:
        return cls.objects.filter(name=name).count()


class Counter(models.Model):
    """A row that transactional steps change: its value counts the writes that committed."""

    name = models.CharField(max_length=255, unique=True)
    value = models.IntegerField(default=0)

    @classmethod
    def add(cls, name: str, by: int = 1) -> int:
        """Increment the row (created at 0 if missing) and return its new value."""
        from django.db.models import F

        cls.objects.get_or_create(name=name)
        cls.objects.filter(name=name).update(value=F("value") + by)
        return cls.objects.get(name=name).value

    @classmethod
    def read(cls, name: str) -> int:
        return cls.objects.filter(name=name).values_list("value", flat=True).first() or 0


class ServiceCharge(models.Model):
    """The fake external service's own record of the work it did: one row per charge made.

    The service is not idempotent: every perform that gets through charges again, so the
    number of rows per effect id is the number of times the operation happened in effect.
    """

    effect_id = models.CharField(max_length=255, db_index=True)
    result = models.JSONField(null=True)
    pid = models.IntegerField()
    created_at = models.DateTimeField(auto_now_add=True)


class ServiceCall(models.Model):
    """Every call made to the fake service (lookup or perform), by which process, and how it went."""

    effect_id = models.CharField(max_length=255, db_index=True)
    call = models.CharField(max_length=16)
    outcome = models.CharField(max_length=32)
    pid = models.IntegerField()
    created_at = models.DateTimeField(auto_now_add=True)


class ServiceScript(models.Model):
    """What the fake service does at its next calls for an effect id, in order (one row per call)."""

    effect_id = models.CharField(max_length=255, db_index=True)
    call = models.CharField(max_length=16)
    action = models.CharField(max_length=32)


class ChaosLedger(models.Model):
    """What the chaos suite's step bodies, effects and compensations did, one row each time they ran.

    Written by ``tests.testapp.chaos`` on a connection of its own in autocommit (never inside a
    transaction of durableflow's, so a rolled-back delivery cannot take a row back), with the
    database's clock at the insert. ``nonce`` makes a retried insert (after a dropped connection)
    write its row once.
    """

    nonce = models.CharField(max_length=32, unique=True)
    execution_id = models.CharField(max_length=200, db_index=True)
    step = models.CharField(max_length=255)
    kind = models.CharField(max_length=16)  # body, perform, compensate
    pid = models.IntegerField()
    at = models.DateTimeField()

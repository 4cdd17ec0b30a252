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

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

from django.contrib import admin

from project.demo.models import FakeCharge


@admin.register(FakeCharge)
class FakeChargeAdmin(admin.ModelAdmin):
    """What the fake payment provider holds: one row per idempotency key, however often it was called."""

    list_display = ["idempotency_key", "cents", "calls", "created_at"]
    readonly_fields = ["idempotency_key", "cents", "calls", "created_at"]

    def has_add_permission(self, request):
        return False

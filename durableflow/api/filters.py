"""Filters of the API's lists: named fields only, each value checked before it reaches SQL.

Request parameters are never expanded into ORM keyword arguments (``filter(**request.GET)``
would let ``?_connector=OR`` or ``?lease_token__startswith=`` through: CVE-2025-64459); each
filter names its field and lookup here, and the views refuse parameters nobody declared.
"""

from __future__ import annotations

import django_filters
from django import forms

from durableflow import values
from durableflow.engine.starts import MAX_ID_LENGTH
from durableflow.engine.states import ExecutionStatus
from durableflow.models import Execution

__all__ = ["ExecutionFilter", "TextFilter"]


class _TextField(forms.CharField):
    """A value that can be compared with a stored id or name: no NUL, no lone surrogate."""

    def __init__(self, **kwargs):
        super().__init__(max_length=MAX_ID_LENGTH, strip=False, **kwargs)

    def validate(self, value):
        super().validate(value)
        fault = values.text_fault(value) if value else None
        if fault is not None:
            raise forms.ValidationError(f"not a name or id: {fault}")


class TextFilter(django_filters.CharFilter):
    """Exact match on a text column."""

    field_class = _TextField


class ExecutionFilter(django_filters.FilterSet):
    status = django_filters.ChoiceFilter(
        choices=[(status, status) for status in ExecutionStatus.choices], help_text="one status"
    )
    workflow = TextFilter(help_text="the workflow's name")
    parent = TextFilter(field_name="parent_id", help_text="the parent execution's id (children of it)")
    root = TextFilter(field_name="root_id", help_text="the root execution's id (its whole tree)")

    class Meta:
        model = Execution
        fields: list[str] = []

"""The inputs of the admin's actions: a JSON payload field and the action forms.

A form only validates what the operator typed, with the same code as the REST API and the
verb: the JSON is parsed by ``values.parse_json`` (the API's parser), a payload is checked by
the check ``signal`` and ``complete_token`` run (``INVALID_PAYLOAD``, ``PAYLOAD_TOO_LARGE``
with the JSON pointer). Whether the action may happen is the verb's decision, made when it runs.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from django import forms
from django.core.exceptions import ValidationError

from durableflow import exceptions, values
from durableflow.conf import df_settings
from durableflow.engine.waits import check_payload

__all__ = ["JsonField", "ActionForm", "ReasonForm", "PayloadForm", "SignalForm", "TokenForm", "ForkForm"]


def payload_verdict(value: Any) -> Any:
    """What the verbs make of a payload (``WorkflowValueError`` if it is not one)."""
    return check_payload(value, df_settings.MAX_PAYLOAD_BYTES)


class JsonField(forms.CharField):
    """A durable value typed as JSON; empty means ``null`` unless ``required``.

    ``verdict(value)`` returns the value as the verb takes it or raises ``WorkflowValueError``
    (a payload's check by default; None: the form's ``clean`` decides, as for a document).
    """

    widget = forms.Textarea(
        attrs={"rows": 6, "cols": 60, "class": "vLargeTextField df-json-input", "spellcheck": "false"}
    )
    default_error_messages = {"syntax": "Not valid JSON: %(error)s."}

    def __init__(self, *, verdict: Callable[[Any], Any] | None = payload_verdict, **kwargs: Any) -> None:
        kwargs.setdefault("strip", True)
        self.verdict = verdict
        super().__init__(**kwargs)

    def to_python(self, value: Any) -> Any:
        text = super().to_python(value)
        if text in self.empty_values:
            return None
        try:
            parsed = values.parse_json(text)
        except ValueError as exc:
            raise ValidationError(self.error_messages["syntax"], code="INVALID_JSON", params={"error": exc}) from None
        if self.verdict is None:
            return parsed
        try:
            return self.verdict(parsed)
        except exceptions.WorkflowValueError as exc:
            raise ValidationError(f"{exc.code}: {exc.message}", code=exc.code) from None

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, str) or value is None:
            return value
        return json.dumps(value, indent=2, ensure_ascii=False)


class ActionForm(forms.Form):
    """The inputs of one action on ``obj`` (the record the action is for; None in bulk)."""

    def __init__(self, *args: Any, obj: Any = None, **kwargs: Any) -> None:
        self.obj = obj
        super().__init__(*args, **kwargs)


class ReasonForm(ActionForm):
    reason = forms.CharField(
        required=False,
        max_length=500,
        help_text="Recorded as the execution's error message.",
        widget=forms.TextInput(attrs={"size": 60}),
    )


class PayloadForm(ActionForm):
    payload = JsonField(required=False, help_text="JSON data; empty sends null.")


class SignalForm(PayloadForm):
    name = forms.CharField(max_length=200, help_text="The signal's name, as the workflow waits for it.")
    field_order = ["name", "payload"]


class TokenForm(PayloadForm):
    token = forms.CharField(max_length=500, help_text="The token the execution waits for.")
    field_order = ["token", "payload"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        waiting_for = getattr(self.obj, "waiting_for", None) or {}
        if waiting_for.get("token"):
            self.fields["token"].initial = waiting_for["token"]


class ForkForm(ActionForm):
    from_step = forms.ChoiceField(
        label="From step", help_text="The new execution keeps the journal before this step and runs it again."
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        keys = [] if self.obj is None else list(self.obj.steps.order_by("id").values_list("key", flat=True))
        self.fields["from_step"].choices = [(key, key) for key in keys]

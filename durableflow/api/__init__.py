"""The REST API, mounted by ``path("api/durableflow/", include("durableflow.urls"))``.

One module per resource (``executions``, ``workflows``, ``documents``, ``waits``: events,
tokens, signals; ``schema``), each a thin view over ``durableflow.operations``; shared by all:
``base`` (the view policies), ``permissions`` (Django's model permissions), ``throttles``,
``errors`` (one bounded error shape), ``parsers`` (strict JSON, bounded, linear), ``params``
(numeric query parameters), ``renderers``, ``serializers``, ``pagination`` (key sets),
``filters`` and ``openapi``.

Needs only "rest_framework" and "durableflow" in INSTALLED_APPS; django-filter and
drf-spectacular are imported as libraries.
"""

"""The REST API (SPEC §10), mounted by ``path("api/durableflow/", include("durableflow.urls"))``.

One module per resource (``executions``, ``workflows``, ``waits``: events, tokens, signals; ``schema``), each a thin view over
``durableflow.operations``; shared by all: ``base`` (the view policies), ``permissions``,
``errors`` (one error shape), ``parsers`` (strict, bounded JSON), ``renderers``,
``serializers``, ``pagination`` (key sets), ``filters`` and ``openapi``.

Needs only "rest_framework" and "durableflow" in INSTALLED_APPS; django-filter and
drf-spectacular are imported as libraries.
"""

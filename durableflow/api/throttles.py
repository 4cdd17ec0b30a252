"""Throttling the API: the project's DRF throttles, and one that counts before authentication.

The API views apply the project's ``REST_FRAMEWORK["DEFAULT_THROTTLE_CLASSES"]``, read when a
request comes (like its authentication classes). DRF checks throttles last, after the
credentials: a request with a wrong Basic password has cost its password hash (some 0.4 s of
PBKDF2) and been refused before any throttle counts it. ``AddressRateThrottle`` counts
requests per client address without looking at the user, and the API checks it *before*
authentication, so that a flood of guesses is cut before any hashing::

    REST_FRAMEWORK = {
        "DEFAULT_THROTTLE_CLASSES": [
            "durableflow.api.throttles.AddressRateThrottle",   # before authentication
            "rest_framework.throttling.UserRateThrottle",      # after it, per user
        ],
        "DEFAULT_THROTTLE_RATES": {"address": "120/minute", "user": "1200/minute"},
    }

Counts live in Django's default cache: per process with the local-memory cache, shared with a
shared one (Redis, Memcached). The client address is DRF's (``REMOTE_ADDR``, or
``X-Forwarded-For`` behind ``NUM_PROXIES`` proxies).
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured
from rest_framework.settings import api_settings
from rest_framework.throttling import SimpleRateThrottle

__all__ = ["AddressRateThrottle", "before_authentication"]


class AddressRateThrottle(SimpleRateThrottle):
    """Requests per client address (rate: ``DEFAULT_THROTTLE_RATES["address"]``), whoever asks."""

    scope = "address"
    before_authentication = True

    def get_rate(self) -> str | None:
        # Read now, not at import (DRF's own reads its class attribute once): override_settings works.
        try:
            return api_settings.DEFAULT_THROTTLE_RATES[self.scope]
        except KeyError:
            raise ImproperlyConfigured(
                f'AddressRateThrottle needs REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]["{self.scope}"], '
                'e.g. "120/minute"'
            ) from None

    def get_cache_key(self, request: Any, view: Any) -> str:
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}


def before_authentication(throttle: Any) -> bool:
    """Whether the API checks ``throttle`` before the request's credentials."""
    return getattr(throttle, "before_authentication", False)

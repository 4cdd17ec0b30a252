"""Options validate themselves when they are defined (SPEC §2.1)."""

from __future__ import annotations

import pytest

from durableflow import Concurrency, RateLimit, Retry, RetryableError


def test_retry_delays_back_off_and_cap():
    policy = Retry(max_attempts=5, interval=1.0, backoff=2.0, max_interval=5)
    assert [policy.delay(n) for n in range(1, 6)] == [1, 2, 4, 5, 5]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Retry(max_attempts=0), "max_attempts must be at least 1"),
        (lambda: Retry(interval=-1), "interval must not be negative"),
        (lambda: Retry(backoff=0.5), "backoff must be at least 1"),
        (lambda: RateLimit("k", 0, 1), "limit must be at least 1"),
        (lambda: RateLimit("k", 2, 1, units=3), "units must be between 1 and limit"),
        (lambda: Concurrency("", 1), "key must not be empty"),
        (lambda: RetryableError("x", max_attempts=0), "max_attempts must be at least 1"),
    ],
)
def test_invalid_options_are_refused_at_definition(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_retry_from_setting():
    assert Retry.from_setting(None) == Retry(max_attempts=1)
    assert Retry.from_setting({"max_attempts": 4}).max_attempts == 4

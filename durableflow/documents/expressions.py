"""JMESPath guards, inputs and ``with``: compiled once per text, evaluated over the run's scope.

The scope a document's expressions read is ``{input, data, event, results, visits}`` (a
DAG node's ``with`` reads ``{input, nodes}``). Evaluation is pure: the same scope gives the
same answer on every replay, so a guard needs no journal record of its own.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import jmespath
from jmespath.exceptions import JMESPathError

from durableflow import exceptions
from durableflow.documents.shape import storable

__all__ = ["compile_expression", "evaluate", "truthy", "MAX_EXPRESSION"]

MAX_EXPRESSION = 2000  # characters: jmespath's parser recurses on nesting


@lru_cache(maxsize=4096)
def _compiled(text: str) -> Any:
    return jmespath.compile(text)


def compile_expression(text: Any, pointer: str) -> str:
    """Check that ``text`` is a JMESPath expression; ``DocumentError`` at ``pointer`` if not."""
    if not isinstance(text, str) or not text.strip():
        raise exceptions.DocumentError(
            "INVALID_EXPRESSION", f"expected a JMESPath expression (a non-blank string), not {_show(text)}",
            pointer=pointer,
        )
    if len(text) > MAX_EXPRESSION:
        raise exceptions.DocumentError(
            "INVALID_EXPRESSION", f"the expression is {len(text)} characters, over {MAX_EXPRESSION}", pointer=pointer
        )
    storable(text, pointer)
    try:
        _compiled(text)
    except (JMESPathError, RecursionError, ValueError, TypeError) as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise exceptions.DocumentError("INVALID_EXPRESSION", f"{text!r} is not JMESPath: {message}", pointer=pointer)
    return text


def evaluate(text: str, scope: dict[str, Any], pointer: str) -> Any:
    """The value of ``text`` over ``scope``; ``DocumentError("EXPRESSION_FAILED")`` if it raises."""
    try:
        return _compiled(text).search(scope)
    except (JMESPathError, RecursionError, ValueError, TypeError, ArithmeticError) as exc:
        raise exceptions.DocumentError(
            "EXPRESSION_FAILED", f"{text!r} failed on the run's data: {exc}", pointer=pointer
        ) from None


def truthy(value: Any) -> bool:
    """JMESPath's truth: false, null, "", [] and {} are false; every number is true."""
    return not (value is None or value is False or value == "" or value == [] or value == {})


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:55] + "..."

"""Registering workflows and finding them by name or function."""

from __future__ import annotations

import pytest

import durableflow
from durableflow.registry import Registry, WorkflowDefinition, registry


def test_a_workflow_is_found_by_name_or_by_its_function():
    from tests.testapp.workflows import steps

    assert registry.resolve("t.steps") is registry.resolve(steps) is steps.__durableflow__
    assert steps.__durableflow__.version == "1"


def test_installed_apps_workflows_modules_are_discovered():
    names = {definition.name for definition in registry.all()}
    assert {"t.steps", "demo.order-total", "demo.reminder", "demo.flaky-import"} <= names


def test_two_functions_cannot_share_a_name():
    local = Registry()
    local.register(WorkflowDefinition("same", test_two_functions_cannot_share_a_name))
    with pytest.raises(ValueError, match="already registered"):
        local.register(WorkflowDefinition("same", test_a_workflow_is_found_by_name_or_by_its_function))


def test_unknown_workflows_raise_a_start_error():
    with pytest.raises(durableflow.WorkflowStartError) as caught:
        registry.resolve("no-such-workflow")
    assert caught.value.code == "UNKNOWN_WORKFLOW"


def test_async_functions_are_refused():
    async def not_sync(ctx, params):
        return None

    with pytest.raises(TypeError, match="plain function"):
        durableflow.workflow("async-one")(not_sync)

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


# Versions side by side ------------------------------------------------------------------------


def _v(version: str, default: bool = False):
    """A workflow function of its own per version (versions side by side are different functions)."""

    def fn(ctx, params):
        return version

    fn.__qualname__ = f"order_v{version.replace('.', '_')}"
    return WorkflowDefinition("order", fn, version=version, default=default)


def test_a_start_runs_the_newest_version_compared_as_numbers():
    local = Registry()
    for version in ("9", "10", "2"):
        local.register(_v(version))
    assert local.get("order").version == "10"
    assert [d.version for d in local.versions("order")] == ["2", "9", "10"]
    assert local.get("order", "9").version == "9" and local.get("order", "11") is None
    assert local.is_current(local.get("order")) and not local.is_current(local.get("order", "2"))
    assert [d.version for d in local.all()] == ["10"]  # what a start can name, once per name


def test_the_default_version_wins_over_a_newer_one_and_only_one_may_be_default():
    local = Registry()
    local.register(_v("1", default=True))
    local.register(_v("2"))
    assert local.get("order").version == "1"
    with pytest.raises(ValueError, match="already marked default=True"):
        local.register(_v("3", default=True))


def test_the_same_function_under_another_version_replaces_itself():
    local = Registry()
    definition = _v("1")
    local.register(definition)
    local.register(WorkflowDefinition("order", definition.fn, version="2"))  # its decorator edited, re-imported
    assert [d.version for d in local.versions("order")] == ["2"]


def test_unregistering_a_version_leaves_the_others():
    local = Registry()
    local.register(_v("1"))
    local.register(_v("2"))
    local.unregister("order", "2")
    assert local.get("order").version == "1" and local.get("order", "2") is None
    local.unregister("order")
    assert local.get("order") is None and local.versions("order") == []


def test_a_version_must_be_a_short_non_blank_string():
    for bad in ("", " 1", "x" * 65):
        with pytest.raises(ValueError, match="workflow version"):
            durableflow.workflow("bad-version", version=bad)

"""The tracking proxy: what a selector read, and which changes touch it (plain Python)."""

from __future__ import annotations

import copy

import pytest

from durableflow import WorkflowValueError
from durableflow.engine.tracking import Reads, draft, require_sync, touched, track, unwrap

STATE = {"ready": False, "count": 3, "items": [{"id": 1}, {"id": 2}], "meta": {"owner": "ann", "tags": ["x"]}}


def reads_of(selector, state=STATE):
    reads = Reads()
    result = unwrap(selector(track(state, reads)))
    return result, reads.as_list()


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        (lambda s: s["ready"], [{"path": ["ready"], "read": "value"}]),
        (lambda s: s.get("missing"), [{"path": ["missing"], "read": "type"}]),
        (
            lambda s: "owner" in s["meta"],
            [{"path": ["meta"], "read": "type"}, {"path": ["meta", "owner"], "read": "type"}],
        ),
        (
            lambda s: s["items"][0]["id"],
            [
                {"path": ["items"], "read": "type"},
                {"path": ["items", 0], "read": "type"},
                {"path": ["items", 0, "id"], "read": "value"},
            ],
        ),
        (lambda s: len(s["items"]), [{"path": ["items"], "read": "shape"}]),
        (lambda s: s["meta"], [{"path": ["meta"], "read": "value"}]),  # a returned subtree is read whole
        (lambda s: s["items"][-1]["id"] if s["items"] else None, None),
    ],
)
def test_a_selector_records_the_paths_it_reads(selector, expected):
    result, reads = reads_of(selector)
    if expected is not None:
        assert reads == expected
    assert result == selector(copy.deepcopy(STATE))


def test_a_negative_index_or_a_slice_depends_on_the_length():
    _, reads = reads_of(lambda s: s["items"][-1]["id"])
    assert {"path": ["items"], "read": "shape"} in reads
    result, reads = reads_of(lambda s: [item["id"] for item in s["items"][:1]])
    assert result == [1] and {"path": ["items"], "read": "shape"} in reads


def test_iteration_comparison_and_conversion_work_on_the_proxy():
    assert reads_of(lambda s: [item["id"] for item in s["items"]])[0] == [1, 2]
    assert reads_of(lambda s: sorted(s["meta"]))[0] == ["owner", "tags"]
    assert reads_of(lambda s: s["meta"]["tags"] == ["x"])[0] is True
    assert reads_of(lambda s: dict(s["meta"]))[0] == {"owner": "ann", "tags": ["x"]}
    assert reads_of(lambda s: {"id": 2} in s["items"])[0] is True
    assert reads_of(lambda s: s["meta"]["tags"] + ["y"])[0] == ["x", "y"]
    assert reads_of(lambda s: copy.deepcopy(s["items"]))[0] == [{"id": 1}, {"id": 2}]


@pytest.mark.parametrize(
    "mutation",
    [
        lambda s: s.__setitem__("ready", True),
        lambda s: s["items"].append(3),
        lambda s: s["items"][0].update(id=5),
        lambda s: s["meta"].pop("owner"),
        lambda s: s["items"].sort(),
        lambda s: s.__delitem__("count"),
        lambda s: s["meta"].setdefault("x", 1),
    ],
)
def test_a_selector_cannot_change_the_state(mutation):
    state = copy.deepcopy(STATE)
    with pytest.raises(WorkflowValueError) as raised:
        mutation(track(state, Reads()))
    assert raised.value.code == "STORE_READ_ONLY"
    assert state == STATE


def test_in_place_addition_is_refused_too():
    items = track(copy.deepcopy(STATE), Reads())["items"]
    with pytest.raises(WorkflowValueError, match="selectors only read"):
        items += [3]


def _reads(*entries):
    return [{"path": list(path), "read": read} for path, read in entries]


@pytest.mark.parametrize(
    ("reads", "change", "woken"),
    [
        (_reads((["ready"], "value")), lambda d: d.update(count=4), False),
        (_reads((["ready"], "value")), lambda d: d.update(ready=True), True),
        (_reads((["ready"], "value")), lambda d: d.pop("ready"), True),
        (_reads((["count"], "value")), lambda d: d.update(count=3.0), True),  # 3 -> 3.0 is a change
        (_reads((["items"], "shape")), lambda d: d["items"][0].update(id=9), False),
        (_reads((["items"], "shape")), lambda d: d["items"].append({"id": 3}), True),
        (_reads((["items"], "type")), lambda d: d["items"].append({"id": 3}), False),
        (_reads((["items"], "type")), lambda d: d.update(items={}), True),
        (_reads((["items", 0, "id"], "value")), lambda d: d["items"][1].update(id=7), False),
        (_reads((["items", 0, "id"], "value")), lambda d: d["items"].pop(0), True),
        (_reads((["meta"], "shape")), lambda d: d["meta"].update(owner="bob"), False),
        (_reads((["meta"], "shape")), lambda d: d["meta"].update(extra=1), True),
        (_reads((["missing"], "type")), lambda d: d.update(missing=None), True),
        (_reads(([], "value")), lambda d: d.update(count=3), False),
    ],
)
def test_a_change_touches_a_waiter_only_where_it_read(reads, change, woken):
    new = draft(STATE)
    change(new)
    assert touched(STATE, new, reads) is woken


def test_a_draft_is_a_plain_deep_copy():
    copied = draft(STATE)
    copied["items"][0]["id"] = 99
    assert STATE["items"][0]["id"] == 1


def test_coroutine_functions_are_refused():
    async def updater(draft):
        return draft

    with pytest.raises(WorkflowValueError) as raised:
        require_sync(updater, "updater")
    assert raised.value.code == "STORE_CALLBACK_NOT_SYNC"
    assert "updater" in raised.value.message and "sync" in raised.value.message
    with pytest.raises(TypeError):
        require_sync("not callable", "selector")


def test_a_store_name_belongs_to_the_module_that_defined_it():
    import durableflow
    from durableflow.engine.store_types import resolve_store

    first = durableflow.define_store("tracking-unique", initial={"n": 0})
    assert durableflow.define_store("tracking-unique", initial={"n": 1}).initial == {"n": 1}  # redefined here
    assert resolve_store("tracking-unique").origin == first.origin == __name__
    with pytest.raises(ValueError, match="already defined in tests.engine.test_store_tracking"):
        exec("import durableflow; durableflow.define_store('tracking-unique')", {"__name__": "elsewhere"})
    with pytest.raises(WorkflowValueError) as raised:
        resolve_store("no-such-store")
    assert raised.value.code == "UNKNOWN_STORE"
    with pytest.raises(ValueError):
        durableflow.define_store("")

"""A shared pick list: pickers take one item each; a picker that finds the list empty waits on it."""

import durableflow

PickList = durableflow.define_store("warehouse.pick-list", initial=lambda: {"items": []})


def first_item(state):
    return state["items"][0] if state["items"] else None


def remove_item(draft, item):
    draft["items"].remove(item)


def pack(picker, item):
    return {"picker": picker, "item": item, "box": f"BOX-{item}"}


@durableflow.workflow("warehouse.picker", version="1")
def picker(ctx, params):
    """Claim the first item of the list (exactly one picker gets each), then pack it."""
    picks = ctx.step.store(PickList, id=params["list"])
    item = picks.take("claim", first_item, remove_item)  # waits while the list is empty
    return ctx.step.run("pack", pack, params["picker"], item)


def add_items(list_id, items):
    """From a view, a command, the shell: add items; waiting pickers are woken once it commits."""
    return durableflow.stores.update(PickList, list_id, lambda draft: draft["items"].extend(items))

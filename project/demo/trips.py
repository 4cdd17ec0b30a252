"""A trip books a flight, a hotel and a car; when one fails, the bookings made are undone."""

import durableflow


class SoldOut(Exception):
    """The supplier has nothing left."""


def book_flight(trip):
    return {"flight": f"FL-{trip['trip_id']}"}


def cancel_flight(booking):
    return {"cancelled": booking["flight"]}


def book_hotel(trip):
    return {"hotel": f"HT-{trip['trip_id']}"}


def cancel_hotel(booking):
    return {"cancelled": booking["hotel"]}


def rent_car(trip):
    if trip.get("car") == "sold out":
        raise SoldOut(f"no car left in {trip['city']}")
    return {"car": f"CR-{trip['trip_id']}"}


def return_car(booking):
    return {"returned": booking["car"]}


@durableflow.workflow("trips.book", version="1")
def book_trip(ctx, params):
    """A saga: each booking registers its undo; a failure runs them last-first and ends "compensated"."""
    flight = ctx.step.run("flight", book_flight, params, compensate=cancel_flight)
    hotel = ctx.step.run("hotel", book_hotel, params, compensate=cancel_hotel)
    car = ctx.step.run("car", rent_car, params, compensate=return_car)
    ctx.metadata.set("stage", "booked")
    return {**flight, **hotel, **car}

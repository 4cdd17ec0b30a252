"""The demo's sample workflows, one module per capability (discovered as the app's ``workflows``)."""

from project.demo import basics, documents, orders, payments, trips, warehouse  # noqa: F401

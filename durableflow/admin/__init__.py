"""durableflow's admin: one module per model family, on shared bases.

``base``       ``RecordAdmin``: read-only record pages (view permission), estimated counts,
               panels below the fields
``actions``    ``Action`` and ``SteeringMixin``: a verb of ``durableflow.operations`` behind a
               confirmation page, a permission and CSRF (page buttons and bulk actions)
``forms``      the actions' inputs (a JSON payload field validated as a durable value)
``display``    pretty JSON, status badges, durations, times, "waiting for … until …"
``timeline``   the journal on a shared time axis
``paging``     the paginator that never counts a large table
``dates``      a date hierarchy from MIN/MAX instead of SELECT DISTINCT
``executions`` executions and their journals
``stores``     stores: state, waiters, the ledger of applied steps
``effects``    effects: status, attempts, who began it
``events``     published events, signals and token completions; an execution's waits (a panel)
``ratelimits`` rate-limit admissions and the requests still waiting
``documents``  workflow documents: edited (a new revision per save), problems at the member,
               the statechart as SVG

A capability adds its pages as a module here (``stores``, ``effects``, ``events``…) importing
these bases, and one import line below.
"""

# Importing a module registers its ModelAdmins.
from durableflow.admin import documents, effects, events, executions, ratelimits, stores  # noqa: F401

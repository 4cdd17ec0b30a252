"""The verbs and what surrounds them, in the test process: the registry, values and error codes,
settings and checks, database faults and lease holders, step timeouts, schedules, signals, logs
and status, pruning, replay checks, store tracking, the operations API and ``WorkflowTester``
itself. A test here starts no worker (one that must, like the timeouts' on real pools, is marked
``integration``).

What holds both storages to one behaviour belongs in ``tests/contract/``; the ORM adapter's
own machinery in ``tests/orm/``.
"""

"""The verbs and what surrounds them, in the test process: the registry, values and error
codes, settings and checks, faults and lease holders, timeouts, schedules, signals and logs,
the operations API, ``WorkflowTester`` itself. A test here starts no worker (one that must,
like the timeouts' on real pools, is marked ``integration``).

What holds both storages to one behaviour belongs in ``tests/contract/``.
"""

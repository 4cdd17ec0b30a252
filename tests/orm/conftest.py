"""The Django/PostgreSQL adapter under the engine: the hot path's SQL and prepared statements,
leases and their heartbeat, query counts, transactional steps on the ORM, early deliveries,
the finish notification and its waiters, connection healing, the filesystem transport.

Tests here run in the test process against the test database; the two that need a real worker
are marked ``integration``.
"""

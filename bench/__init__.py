"""The benchmark harness: Kyverno-shaped traffic against a running system, and
the analytics comparison with a PostgreSQL JSONB baseline
(``reports-pipeline bench``)."""

"""Numbered, idempotent ClickHouse schema migrations (``NNNN_name.sql``)."""

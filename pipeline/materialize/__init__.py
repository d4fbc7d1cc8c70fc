"""The change log, in log order, into ClickHouse."""

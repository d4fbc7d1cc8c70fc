"""The ClickHouse adapter (clickhouse-connect, server or embedded chDB) and its
schema migrations."""

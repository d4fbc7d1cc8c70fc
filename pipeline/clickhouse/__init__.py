"""The ClickHouse adapter (clickhouse-connect, server or embedded chDB) and its
schema migrations.

One ``Connection`` (``connection``) per process owns the clients, the threads
that run queries and the migrations; each user of ClickHouse is given the
part it asks of it, which runs its queries there: ``ObjectReads`` (the
frontend's reads), ``AnalyticsQueries`` (analysts' queries), ``ChangeWrites``
(the materializer), ``CommitterQueries`` (the committer's recovery),
``AggregateWrites`` (the aggregation agent) and ``ProgressReads`` (the
materializer's position, for the change-log cache and the lag monitor).
Knows nothing of Kafka."""

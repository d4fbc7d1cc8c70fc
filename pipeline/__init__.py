"""The stream-processing side of the reports pipeline, laid out by the stages a
write goes through.

- ``model``: what every stage and the frontend share, pure data and no I/O:
  the resource types, report objects, the topics' wire formats and policies,
  resourceVersions.
- ``commit``: the committer. ``decision`` decides one write (pure), ``state``
  holds the current version of every key, ``service`` is its Kafka side
  (requests in, changes and replies out, in one transaction).
- ``materialize``: the change log into ClickHouse. ``rows`` encodes (pure),
  ``consumer`` reads the log and writes the rows.
- ``aggregate``: counts per namespace and policy. ``counts`` is the
  arithmetic (pure), ``agent`` the Faust agent's tables and windows.
- ``kafka`` and ``clickhouse``: the adapters (aiokafka and Faust;
  clickhouse-connect), knowing no stage.
- ``serving``: the frontend's adapters (the change-log cache, the write
  submitter), implementing the ports ``apiserver.storage.ports`` defines.
- ``observe``: metrics and the readers' lag; ``runtime``: process plumbing.
- ``settings`` is read once per process; ``worker`` wires the Faust app.

Nothing here imports ``apiserver``; the import-linter contracts in
pyproject.toml check the layout.
"""

"""The stream-processing side of the reports pipeline.

Pure domain modules (``resources``, ``objects``, ``commit``, ``messages``) do no
I/O; adapters (``kafka``, ``store``) wrap aiokafka/Faust and clickhouse-connect;
``worker`` wires the Faust agents. Nothing here imports ``apiserver``.
"""

"""Apache Kafka on this machine: the single-node broker ``up`` runs when no
KAFKA_BOOTSTRAP is given (``singlenode``, its jars pinned by
``kafka-broker.pom.xml`` and fetched with Maven) and a replicated cluster of
nodes on loopback (``cluster``, for the fault tests and the benchmark).
Starts and stops Java processes; knows nothing of the pipeline's topics."""

"""Apache Kafka on this machine: the single-node broker ``up`` runs when no
KAFKA_BOOTSTRAP is given (``singlenode``) and a replicated cluster of nodes
on loopback (``cluster``, for the fault tests and the benchmark), both of
KRaft nodes (``node``) on jars pinned by ``kafka-broker.pom.xml`` and fetched
with Maven (``jars``); and MirrorMaker 2 (``mirror``), which mirrors clusters'
public topics into a central Kafka for a fleet.
Starts and stops Java processes; of the pipeline's topics it knows only the
public ones' names, which the mirror copies."""

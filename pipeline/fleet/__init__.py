"""The fleet: many clusters' public topics (``<prefix>.changes`` and
``<prefix>.summaries``) followed into one analytics store, with the cluster
in every row (``reports-pipeline fleet``). Each cluster is a source: a
name, the bootstrap of its Kafka and its topic prefix."""

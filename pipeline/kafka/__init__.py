"""The Kafka adapter: aiokafka and Faust's transport, the committer's
transactions, what a consumer may commit, reading the change log."""

"""The Kubernetes aggregated-API frontend for policy reports.

It validates requests, publishes writes to Kafka (the committer decides them),
serves reads from ClickHouse overlaid with the change log's newest tail, and
renders every failure as a Kubernetes ``Status``. It may use ``pipeline``'s
public modules; ``pipeline`` never imports it.
"""

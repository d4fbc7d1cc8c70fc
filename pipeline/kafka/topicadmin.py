"""Kafka adapter: the pipeline's topics created with their policies and
replication, and the policies of existing ones brought up to date."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaConnectionError, TopicAlreadyExistsError

# its clients' connections are mended as every client's (pipeline.kafka.internals)
from pipeline.kafka import clientconfig  # noqa: F401
from pipeline.model import topics
from pipeline.runtime.logs import quiet
from pipeline.settings import Settings

log = logging.getLogger(__name__)


class Unreachable(ConnectionError):
    """No Kafka broker answers at the bootstrap address."""


async def ensure_topics(settings: Settings, bootstrap: str) -> topics.Replication:
    """Create the pipeline's topics with their policies (``pipeline.model.topics``)
    and the replication the cluster allows (``topics.replication``), and bring
    the policies of existing ones up to date. Each has one partition: the
    change log's order is the resourceVersion order. Returns the replication,
    which Faust's own topics take too."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        with quiet("aiokafka"):
            await admin.start()
    except KafkaConnectionError as err:
        await admin.close()
        raise Unreachable(f"no Kafka broker answers at {bootstrap}") from err
    try:
        brokers = len((await admin.describe_cluster())["brokers"])
        replicated = topics.replication(settings, brokers)
        wanted = topics.specs(settings, replicated)
        existing = set(await admin.list_topics())
        missing = [NewTopic(t.name, 1, replicated.factor, topic_configs=t.config)
                   for t in wanted if t.name not in existing]
        if missing:
            try:
                await admin.create_topics(missing)
            except TopicAlreadyExistsError:
                pass
        present = [t for t in wanted if t.name in existing]
        if present:
            await _align_configs(admin, present)
            await _report_replicas(admin, [t.name for t in present], replicated.factor)
    finally:
        await admin.close()
    return replicated


async def _report_replicas(admin: AIOKafkaAdminClient, names: list[str], wanted: int) -> None:
    """Say which existing topics have fewer replicas than wanted: adding
    replicas moves data, an operator's decision (kafka-reassign-partitions.sh)."""
    fewer = []
    for topic in await admin.describe_topics(names):
        counts = {len(p["replicas"]) for p in topic["partitions"]}
        if counts and min(counts) < wanted:
            fewer.append(f"{topic['topic']} ({min(counts)})")
    if fewer:
        log.warning("topics with fewer than %d replicas: %s; add replicas with"
                    " kafka-reassign-partitions.sh", wanted, ", ".join(fewer))


async def topic_configs(admin: AIOKafkaAdminClient, names: Iterable[str]
                        ) -> dict[str, dict[str, str]]:
    """Each topic's configuration as the cluster describes it, by topic name."""
    responses = await admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, name) for name in names])
    return {name: {e[0]: e[1] for e in entries} for response in responses
            for _err, _msg, _rtype, name, entries in response.resources}


async def _align_configs(admin: AIOKafkaAdminClient, specs: list[topics.TopicSpec]) -> None:
    current = await topic_configs(admin, (t.name for t in specs))
    stale = [t for t in specs
             if any(current.get(t.name, {}).get(k) != v for k, v in t.config.items())]
    if stale:
        log.info("updating the policies of topics %s", ", ".join(t.name for t in stale))
        await admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, t.name, t.config)
                                   for t in stale])

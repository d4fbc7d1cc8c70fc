#!/usr/bin/env python3
"""Print policy results as they turn to "fail", from the public result-events topic.

    python examples/print_new_failures.py --data-dir DATA          (a running `up`)
    python examples/print_new_failures.py --bootstrap HOST:PORT [--prefix reports]

Starts at the end of the topic: only failures that happen from now on are
printed, one line each, until interrupted. --from-beginning prints the topic's
whole history first.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient


def where(args: argparse.Namespace) -> tuple[str, str]:
    """The bootstrap servers and the result-events topic."""
    if args.data_dir is not None:
        endpoints = json.loads((args.data_dir / "endpoints.json").read_text())
        return endpoints["kafka_bootstrap"], endpoints["topics"]["result-events"]
    if not args.bootstrap:
        raise SystemExit("give --data-dir of a running `reports-pipeline up`, or --bootstrap")
    return args.bootstrap, f"{args.prefix}.result-events"


async def partitions_of(bootstrap: str, topic: str) -> list[int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        [described] = await admin.describe_topics([topic])
    finally:
        await admin.close()
    if described["error_code"] or not described["partitions"]:
        raise SystemExit(f"no topic {topic} at {bootstrap}")
    return sorted(p["partition"] for p in described["partitions"])


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path,
                        help="the data directory of a running `reports-pipeline up`"
                             " (its endpoints.json says where Kafka is)")
    parser.add_argument("--bootstrap", help="Kafka bootstrap servers")
    parser.add_argument("--prefix", default="reports", help="topic prefix (with --bootstrap)")
    parser.add_argument("--from-beginning", action="store_true",
                        help="print the failures already in the topic first")
    args = parser.parse_args()
    bootstrap, topic = where(args)
    # No consumer group: where to start is decided here, once, before the
    # first fetch: the end offsets read now (the committed end: results of
    # transactions still open are not history), or the beginning.
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                                enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in await partitions_of(bootstrap, topic)]
        consumer.assign(partitions)
        if args.from_beginning:
            await consumer.seek_to_beginning(*partitions)
        else:
            for partition, offset in (await consumer.end_offsets(partitions)).items():
                consumer.seek(partition, offset)
        print(f"watching {topic} at {bootstrap} for new failures", flush=True)
        async for record in consumer:
            event = json.loads(record.value)
            if event["current"] == "fail" and event["previous"] != "fail":
                resource = event["resource"]
                print(f"{event['time']} FAIL {event['namespace']}/{resource['kind']}/"
                      f"{resource['name']} {event['policy']}/{event['rule']}"
                      f" (was {event['previous'] or 'new'}, severity"
                      f" {event.get('severity', '-')}): {event.get('message', '')}", flush=True)
    finally:
        await consumer.stop()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass

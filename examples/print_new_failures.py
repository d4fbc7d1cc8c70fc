#!/usr/bin/env python3
"""Print policy results as they turn to "fail", from the public result-events topic.

    python examples/print_new_failures.py --bootstrap 127.0.0.1:9092 [--prefix reports]

Reads from the end of the topic (add --from-beginning for history) and prints one
line per new failure until interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import json

from aiokafka import AIOKafkaConsumer


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers")
    parser.add_argument("--prefix", default="reports", help="topic prefix")
    parser.add_argument("--from-beginning", action="store_true")
    args = parser.parse_args()
    consumer = AIOKafkaConsumer(
        f"{args.prefix}.result-events", bootstrap_servers=args.bootstrap,
        auto_offset_reset="earliest" if args.from_beginning else "latest",
        fetch_max_wait_ms=50)
    await consumer.start()
    print("watching for new failures", flush=True)
    try:
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

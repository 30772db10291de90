#!/usr/bin/env python3
"""aiokafka's transactional producer and a read_committed consumer against fencelog's Kafka
listener, run by tests/kafka/kafka_transaction_clients.rs:

    aiokafka_transactions.py BOOTSTRAP TOPIC

TOPIC has 2 partitions. An AIOKafkaProducer with a transactional_id commits a transaction of 10
records over both partitions, then aborts one of 5; an AIOKafkaConsumer with
isolation_level="read_committed" reads the 10 and none of the 5, and a read_uncommitted one
reads all 15. Prints one JSON object; exits non-zero (with the reason on stderr) on failure.
"""

import asyncio
import json
import sys

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition


async def read(bootstrap, topic, isolation):
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level=isolation,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        await consumer.seek_to_beginning()
        values = []
        for _ in range(10):
            batches = await consumer.getmany(timeout_ms=400)
            for messages in batches.values():
                values.extend(message.value.decode() for message in messages)
        return values
    finally:
        await consumer.stop()


async def main(bootstrap, topic):
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="aiokafka-tx")
    await producer.start()
    try:
        async with producer.transaction():
            for index in range(10):
                await producer.send(topic, f"committed-{index}".encode(), partition=index % 2)
        await producer.begin_transaction()
        for index in range(5):
            await producer.send(topic, f"aborted-{index}".encode(), partition=index % 2)
        await producer.abort_transaction()
    finally:
        await producer.stop()
    committed = await read(bootstrap, topic, "read_committed")
    uncommitted = await read(bootstrap, topic, "read_uncommitted")
    if sorted(committed) != sorted(f"committed-{index}" for index in range(10)):
        print(f"read_committed read {committed}", file=sys.stderr)
        sys.exit(1)
    if len(uncommitted) != 15:
        print(f"read_uncommitted read {len(uncommitted)} records, not 15", file=sys.stderr)
        sys.exit(1)
    print(json.dumps({"read_committed": len(committed), "read_uncommitted": len(uncommitted)}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))

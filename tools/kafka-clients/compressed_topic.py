#!/usr/bin/env python3
"""Compressed batches through Kafka's own clients (tests/kafka/kafka_compression.rs).

  compressed_topic.py produce BOOTSTRAP TOPIC CODEC COUNT
      confluent-kafka sends COUNT JSON-like values (value(i) below) with compression.type
      CODEC to partition 0 of TOPIC; prints {"sent": COUNT}.
  compressed_topic.py read BOOTSTRAP TOPIC COUNT CLIENT
      CLIENT (confluent or kafka-python) reads COUNT records of partition 0 from offset 0;
      prints {"values": [...], "offsets": [...]} as it decoded them.

The values are the ones the Rust test makes (`json_value` there): the same formula in both.
"""
import json
import sys
import time


def value(index):
    return json.dumps(
        {
            "id": index,
            "user": f"user-{index % 97:05}",
            "event": ["page_view", "click", "search", "checkout"][index % 4],
            "path": f"/products/{index * 7919 % 10000}",
            "note": "fencelog keeps compressed batches as they were sent",
        },
        separators=(",", ":"),
    )


def produce(bootstrap, topic, codec, count):
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": codec,
            "linger.ms": 50,
            "batch.num.messages": 500,
        }
    )
    failures = []
    for index in range(count):
        producer.produce(
            topic,
            value(index).encode(),
            partition=0,
            on_delivery=lambda error, _msg: error and failures.append(str(error)),
        )
        producer.poll(0)
    producer.flush(30)
    if failures:
        raise SystemExit(f"delivery failed: {failures[:3]}")
    print(json.dumps({"sent": count}))


def read(bootstrap, topic, count, client):
    values, offsets = [], []
    deadline = time.time() + 60
    if client == "confluent":
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"compressed-{client}",
                "enable.auto.commit": False,
            }
        )
        consumer.assign([TopicPartition(topic, 0, 0)])
        while len(values) < count and time.time() < deadline:
            message = consumer.poll(1.0)
            if message is None or message.error():
                continue
            values.append(message.value().decode())
            offsets.append(message.offset())
        consumer.close()
    else:
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek(partition, 0)
        while len(values) < count and time.time() < deadline:
            for records in consumer.poll(timeout_ms=1000).values():
                for record in records:
                    values.append(record.value.decode())
                    offsets.append(record.offset)
        consumer.close()
    print(json.dumps({"values": values, "offsets": offsets}))


if __name__ == "__main__":
    command, bootstrap, topic = sys.argv[1:4]
    if command == "produce":
        produce(bootstrap, topic, sys.argv[4], int(sys.argv[5]))
    else:
        read(bootstrap, topic, int(sys.argv[4]), sys.argv[5])

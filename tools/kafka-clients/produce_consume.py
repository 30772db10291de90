#!/usr/bin/env python3
"""Ordinary Kafka client code against fencelog's Kafka listener.

Usage: produce_consume.py BOOTSTRAP TOPIC CLIENT COUNT

CLIENT is `confluent` (librdkafka, `enable.idempotence=true`) or `kafka-python` (its default
producer). Produces COUNT records with keys `k<i>` and values `<client>-<i>` to partition 0 of
TOPIC, then reads partition 0 from the beginning with a consumer outside any group and prints
one line per record: `offset key value`. Exits non-zero on any delivery error.
"""

import sys


def confluent(bootstrap, topic, count):
    from confluent_kafka import Consumer, Producer, TopicPartition, OFFSET_BEGINNING

    errors = []

    def delivered(error, _message):
        if error is not None:
            errors.append(str(error))

    producer = Producer({
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "linger.ms": 5,
    })
    for i in range(count):
        producer.produce(topic, key=f"k{i}", value=f"confluent-{i}", partition=0,
                         on_delivery=delivered)
        producer.poll(0)
    remaining = producer.flush(30)
    if errors or remaining:
        sys.exit(f"delivery failed: {errors[:3]} ({remaining} undelivered)")
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "unused-assign-only",
        "enable.auto.commit": False,
    })
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    seen = []
    while len(seen) < count:
        message = consumer.poll(10)
        if message is None:
            sys.exit(f"timed out after {len(seen)} records")
        if message.error():
            continue
        seen.append((message.offset(), message.key().decode(), message.value().decode()))
    consumer.close()
    return seen


def kafka_python(bootstrap, topic, count):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    futures = [producer.send(topic, key=f"k{i}".encode(), value=f"kafka-python-{i}".encode(),
                             partition=0) for i in range(count)]
    producer.flush(30)
    for future in futures:
        future.get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             enable_auto_commit=False, consumer_timeout_ms=10_000)
    partition = TopicPartition(topic, 0)
    consumer.assign([partition])
    consumer.seek_to_beginning(partition)
    seen = []
    for message in consumer:
        seen.append((message.offset, message.key.decode(), message.value.decode()))
        if len(seen) >= count:
            break
    consumer.close()
    return seen


def main():
    bootstrap, topic, client, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    run = {"confluent": confluent, "kafka-python": kafka_python}[client]
    for offset, key, value in run(bootstrap, topic, count):
        print(offset, key, value)


if __name__ == "__main__":
    main()

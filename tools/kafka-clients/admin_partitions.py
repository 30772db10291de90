#!/usr/bin/env python3
"""Ordinary confluent-kafka (librdkafka) admin code against fencelog's Kafka listener: create a
topic of 3 partitions, grow it to 6 with CreatePartitions, produce to partition 5 and read the
record back, and check that growing to 4 (a shrink) or to 6 again (the same count) is refused
with INVALID_PARTITIONS, and that a validate-only grow changes nothing.

Usage: admin_partitions.py BOOTSTRAP TOPIC

Prints one line per step as it succeeds:
  created 3
  grown to 6
  metadata 6
  produced partition 5 offset O
  consumed partition 5 five
  refused 4 INVALID_PARTITIONS
  refused 6 INVALID_PARTITIONS
  validated 7, metadata 6
Exits non-zero (with the reason on stderr) at the first step that fails.
"""

import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

TIMEOUT = 30


def partitions(admin, topic):
    metadata = admin.list_topics(topic, timeout=TIMEOUT)
    return len(metadata.topics[topic].partitions)


def grow(admin, topic, count, validate_only=False):
    futures = admin.create_partitions(
        [NewPartitions(topic, count)], validate_only=validate_only, request_timeout=TIMEOUT
    )
    for future in futures.values():
        future.result(TIMEOUT)


def main():
    bootstrap, topic = sys.argv[1:3]
    admin = AdminClient({"bootstrap.servers": bootstrap})

    for future in admin.create_topics([NewTopic(topic, num_partitions=3)]).values():
        future.result(TIMEOUT)
    print("created 3", flush=True)

    grow(admin, topic, 6)
    print("grown to 6", flush=True)
    count = partitions(admin, topic)
    if count != 6:
        sys.exit(f"Metadata lists {count} partitions after the grow, not 6")
    print(f"metadata {count}", flush=True)

    producer = Producer({"bootstrap.servers": bootstrap})
    delivered = []
    producer.produce(
        topic, value=b"five", partition=5, on_delivery=lambda e, m: delivered.append((e, m))
    )
    producer.flush(TIMEOUT)
    if not delivered:
        sys.exit("the produce to partition 5 was not delivered in time")
    error, message = delivered[0]
    if error is not None:
        sys.exit(f"the produce to partition 5 failed: {error}")
    print(f"produced partition {message.partition()} offset {message.offset()}", flush=True)

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-reader",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 5, message.offset())])
    deadline = time.monotonic() + TIMEOUT
    read = None
    while read is None and time.monotonic() < deadline:
        polled = consumer.poll(1.0)
        if polled is None:
            continue
        if polled.error() is not None:
            sys.exit(f"reading partition 5 failed: {polled.error()}")
        read = polled
    consumer.close()
    if read is None:
        sys.exit("nothing read back from partition 5")
    print(f"consumed partition {read.partition()} {read.value().decode()}", flush=True)

    for count in (4, 6):
        try:
            grow(admin, topic, count)
        except KafkaException as exception:
            error = exception.args[0]
            if error.code() != KafkaError.INVALID_PARTITIONS:
                sys.exit(f"growing to {count} failed with {error}, not INVALID_PARTITIONS")
            print(f"refused {count} INVALID_PARTITIONS", flush=True)
        else:
            sys.exit(f"growing to {count} was accepted")

    grow(admin, topic, 7, validate_only=True)
    print(f"validated 7, metadata {partitions(admin, topic)}", flush=True)


if __name__ == "__main__":
    main()

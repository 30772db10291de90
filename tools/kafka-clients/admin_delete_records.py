#!/usr/bin/env python3
"""Ordinary confluent-kafka (librdkafka) code against fencelog's Kafka listener: produce 10
records to partition 0 of TOPIC, delete the records before offset 5 with the AdminClient, and see
what consumers see afterwards.

Usage: admin_delete_records.py BOOTSTRAP TOPIC

Prints, one per line, as each step succeeds:
  `produced 10`                      ten records acknowledged at offsets 0..9
  `deleted low_watermark=5`          AdminClient.delete_records' answer for partition 0
  `watermarks 5 10`                  get_watermark_offsets (ListOffsets earliest and latest)
  `out of range`                     a consumer with auto.offset.reset=error asked for offset 0
                                     and was told it is out of range
  `reset to 5`                       a consumer with auto.offset.reset=earliest asked for offset
                                     0 and got its first record at offset 5
  `too far refused`                  deleting before offset 11 (past the high watermark) fails
                                     with OFFSET_OUT_OF_RANGE
Exits non-zero (with the reason on stderr) at the first step that fails.
"""

import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

TIMEOUT_S = 30


def produce(bootstrap, topic):
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    delivered = []

    def on_delivery(error, message):
        if error is not None:
            sys.exit(f"delivery failed: {error}")
        delivered.append(message.offset())

    for index in range(10):
        producer.produce(topic, value=f"record {index}".encode(), partition=0, on_delivery=on_delivery)
        producer.flush(TIMEOUT_S)
    if delivered != list(range(10)):
        sys.exit(f"expected offsets 0..9, got {delivered}")
    print("produced 10", flush=True)


def delete_before(admin, topic, offset):
    futures = admin.delete_records(
        [TopicPartition(topic, 0, offset)], request_timeout=TIMEOUT_S, operation_timeout=TIMEOUT_S
    )
    (future,) = futures.values()
    return future.result(TIMEOUT_S)


def consumer(bootstrap, reset):
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"delete-records-{reset}",
            "enable.auto.commit": False,
            "auto.offset.reset": reset,
        }
    )


def first_event(bootstrap, topic, reset):
    """The first message (or error) a consumer assigned partition 0 at offset 0 gets."""
    c = consumer(bootstrap, reset)
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            message = c.poll(1.0)
            if message is not None:
                return message
        sys.exit(f"no message nor error within {TIMEOUT_S}s (auto.offset.reset={reset})")
    finally:
        c.close()


def main():
    bootstrap, topic = sys.argv[1:3]
    produce(bootstrap, topic)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deleted = delete_before(admin, topic, 5)
    print(f"deleted low_watermark={deleted.low_watermark}", flush=True)

    c = consumer(bootstrap, "earliest")
    low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT_S)
    c.close()
    print(f"watermarks {low} {high}", flush=True)

    message = first_event(bootstrap, topic, "error")
    error = message.error()
    if error is None or error.code() != KafkaError._AUTO_OFFSET_RESET:
        sys.exit(f"expected an offset-out-of-range error at offset 0, got {error or message.offset()}")
    print("out of range", flush=True)

    message = first_event(bootstrap, topic, "earliest")
    if message.error() is not None:
        sys.exit(f"expected a record after the reset, got {message.error()}")
    print(f"reset to {message.offset()}", flush=True)

    try:
        delete_before(admin, topic, 11)
        sys.exit("deleting past the high watermark succeeded")
    except KafkaException as exception:
        if exception.args[0].code() != KafkaError.OFFSET_OUT_OF_RANGE:
            sys.exit(f"deleting past the high watermark failed with {exception}")
    print("too far refused", flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Ordinary confluent-kafka (librdkafka) admin and consumer code against a fencelog cluster's
Kafka listeners, for the steps of tests/cli/cluster_topic_delete.rs that go through Kafka.

Usage: cluster_topic_delete.py BOOTSTRAP COMMAND TOPIC [ARGS]

- `delete TOPIC`: DeleteTopics, then Metadata until the topic is no longer listed. Prints
  `deleted`, `not listed`.
- `create TOPIC PARTITIONS REPLICATION_FACTOR MIN_INSYNC`: CreateTopics with
  `min.insync.replicas`, then Metadata until every partition has a leader. Prints `created`,
  `listed`.
- `consume TOPIC`: reads partition 0 from the beginning up to its high watermark (no group:
  assigned, nothing committed) and prints each value, one a line, then `end`.

Exits non-zero with the reason on stderr at the first step that fails.
"""

import sys
import time

TIMEOUT_S = 30.0


def eventually(what, condition):
    deadline = time.time() + TIMEOUT_S
    last = None
    while time.time() < deadline:
        try:
            if condition():
                return
        except Exception as error:  # a client error counts as "not yet"
            last = error
        time.sleep(0.1)
    sys.exit(f"timed out waiting until {what} (last error: {last!r})")


def admin(bootstrap):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def delete(bootstrap, topic):
    client = admin(bootstrap)
    for future in client.delete_topics([topic], operation_timeout=TIMEOUT_S).values():
        future.result(TIMEOUT_S)
    print("deleted", flush=True)
    eventually(
        f"{topic} is no longer listed",
        lambda: topic not in client.list_topics(timeout=10).topics,
    )
    print("not listed", flush=True)


def create(bootstrap, topic, partitions, factor, min_insync):
    from confluent_kafka.admin import NewTopic

    client = admin(bootstrap)
    new = NewTopic(
        topic,
        int(partitions),
        int(factor),
        config={"min.insync.replicas": str(min_insync)},
    )
    for future in client.create_topics([new], operation_timeout=TIMEOUT_S).values():
        future.result(TIMEOUT_S)
    print("created", flush=True)

    def led():
        listed = client.list_topics(topic, timeout=10).topics.get(topic)
        return (
            listed is not None
            and listed.error is None
            and len(listed.partitions) == int(partitions)
            and all(p.leader >= 0 for p in listed.partitions.values())
        )

    eventually(f"{topic} is listed with a leader for every partition", led)
    print("listed", flush=True)


def consume(bootstrap, topic):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "fencelog-cluster-topic-delete",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT_S)
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    position = 0
    deadline = time.time() + TIMEOUT_S
    while position < high:
        if time.time() > deadline:
            sys.exit(f"read {position} of {high} records of {topic}/0 in time")
        message = consumer.poll(1.0)
        if message is None or (message.error() and message.error().code() == -191):
            continue  # nothing yet, or the partition's end (_PARTITION_EOF)
        if message.error():
            sys.exit(f"consume: {message.error()}")
        print(message.value().decode(), flush=True)
        position = message.offset() + 1
    consumer.close()
    print("end", flush=True)


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    bootstrap, command, topic = sys.argv[1:4]
    commands = {"delete": delete, "create": create, "consume": consume}
    if command not in commands:
        sys.exit(f"unknown command {command!r}: use one of {sorted(commands)}")
    commands[command](bootstrap, topic, *sys.argv[4:])


if __name__ == "__main__":
    main()

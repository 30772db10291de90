#!/usr/bin/env python3
"""Ordinary confluent-kafka (librdkafka) code against fencelog's Kafka listener.

Run by tests/kafka/kafka_client_scenarios.rs; prints one JSON object on stdout, diagnostics on stderr,
and exits non-zero (with the reason on stderr) when the client surfaces an error.

    confluent_scenarios.py admin BOOTSTRAP
        AdminClient.create_topics (a 4-partition topic `c-groups-range`, `c-groups-coop` and a
        1-partition `c-produce`), then list_topics. Prints the topics with their partition counts.

    confluent_scenarios.py produce BOOTSTRAP TOPIC
        For every compression.type (none, gzip, snappy, lz4, zstd) and acks (0, 1, all), a
        Producer sends 5 records with a key and headers to partition 0; then a Consumer outside
        any group reads the topic from the beginning. Prints what it read.

    confluent_scenarios.py group BOOTSTRAP TOPIC GROUP STRATEGY
        Two Consumers (one auto-committing, one committing with commit(asynchronous=False)) of
        GROUP subscribe to TOPIC (4 partitions, filled with 10 records each by this script);
        STRATEGY is `default` or a partition.assignment.strategy such as cooperative-sticky.
        They read until each holds 2 partitions and all 40 records were read, commit and close.
        Then 2 more records per partition are produced and a restarted member (a new Consumer of
        GROUP) reads them: it must start at the committed offset 10. Prints the assignments, the
        committed offsets and the offsets the restarted member read.

    confluent_scenarios.py resume BOOTSTRAP TOPIC GROUP
        After a server restart: 1 more record per partition of TOPIC (4 partitions) is produced
        and a new Consumer of GROUP reads the 4 new records. Prints the offsets it read per
        partition: they start at what the group committed before the restart.

    confluent_scenarios.py idempotent-restart BOOTSTRAP TOPIC COUNT
        An idempotent Producer sends COUNT records to partition 0, half of them, then prints
        `restart` and waits for a line on stdin (the test restarts the server meanwhile, with
        records still in flight), then the other half. Every delivery must succeed; a Consumer
        then reads the partition. Prints the values read, in order.
"""

import json
import sys
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

DEADLINE_S = 30
COMPRESSIONS = ["none", "gzip", "snappy", "lz4", "zstd"]
ACKS = ["0", "1", "all"]


def fail(message):
    print(message, file=sys.stderr)
    sys.exit(1)


def admin(bootstrap):
    client = AdminClient({"bootstrap.servers": bootstrap})
    topics = [NewTopic("c-groups-range", 4, 1), NewTopic("c-groups-coop", 4, 1),
              NewTopic("c-produce", 1, 1)]
    for name, future in client.create_topics(topics, operation_timeout=10).items():
        future.result(timeout=DEADLINE_S)
    metadata = client.list_topics(timeout=DEADLINE_S)
    print(json.dumps({name: len(topic.partitions) for name, topic in metadata.topics.items()}))


class Deliveries:
    """Collects delivery reports; any error fails the scenario."""

    def __init__(self):
        self.errors = []
        self.offsets = []

    def __call__(self, error, message):
        if error is not None:
            self.errors.append(str(error))
        else:
            self.offsets.append(message.offset())

    def check(self, producer, what):
        remaining = producer.flush(DEADLINE_S)
        if self.errors or remaining:
            fail(f"{what}: delivery failed: {self.errors[:3]} ({remaining} undelivered)")


def read_from_beginning(bootstrap, topic, partition, count):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "c-reader",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
    messages = []
    deadline = time.monotonic() + DEADLINE_S
    while len(messages) < count and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is None:
            continue
        if message.error():
            fail(f"consumer error: {message.error()}")
        messages.append(message)
    consumer.close()
    if len(messages) < count:
        fail(f"read {len(messages)} of {count} records")
    return messages


def produce(bootstrap, topic):
    sent = 0
    for compression in COMPRESSIONS:
        for acks in ACKS:
            producer = Producer({"bootstrap.servers": bootstrap, "compression.type": compression,
                                 "acks": acks, "linger.ms": 5})
            deliveries = Deliveries()
            for i in range(5):
                producer.produce(topic, partition=0, key=f"{compression}-{acks}-{i}",
                                 value=f"value-{compression}-{acks}-{i}" * 20,
                                 headers=[("compression", compression.encode()),
                                          ("index", str(i).encode()),
                                          ("null", None), ("empty", b"")],
                                 on_delivery=deliveries)
            deliveries.check(producer, f"compression {compression} acks {acks}")
            sent += 5
    read = [
        {"offset": m.offset(), "key": m.key().decode(), "value": m.value().decode(),
         "headers": [[k, None if v is None else v.decode()] for k, v in (m.headers() or [])]}
        for m in read_from_beginning(bootstrap, topic, 0, sent)
    ]
    print(json.dumps({"read": read}))


def fill(bootstrap, topic, partitions, per_partition, first):
    producer = Producer({"bootstrap.servers": bootstrap})
    deliveries = Deliveries()
    for partition in range(partitions):
        for i in range(first, first + per_partition):
            producer.produce(topic, partition=partition, value=f"{partition}-{i}",
                             on_delivery=deliveries)
    deliveries.check(producer, "fill")


def member(bootstrap, topic, group, name, strategy, auto_commit):
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "client.id": name,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": auto_commit,
        "auto.commit.interval.ms": 200,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 300,
    }
    if strategy != "default":
        config["partition.assignment.strategy"] = strategy
    consumer = Consumer(config)
    consumer.subscribe([topic])
    return consumer


def group(bootstrap, topic, group_id, strategy):
    fill(bootstrap, topic, 4, 10, 0)
    members = {
        "auto": member(bootstrap, topic, group_id, "auto", strategy, True),
        "sync": member(bootstrap, topic, group_id, "sync", strategy, False),
    }
    read = set()
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        for name, consumer in members.items():
            message = consumer.poll(0.05)
            if message is None:
                continue
            if message.error():
                fail(f"{name}: {message.error()}")
            read.add((message.partition(), message.offset()))
        sizes = [len(consumer.assignment()) for consumer in members.values()]
        if len(read) == 40 and sizes == [2, 2]:
            break
    else:
        fail(f"no 2+2 split with all 40 records read within {DEADLINE_S} s: "
             f"{len(read)} read, assignments {sizes}")
    assignments = {name: sorted(tp.partition for tp in consumer.assignment())
                   for name, consumer in members.items()}
    # Let the auto-committer commit what it read (close commits it too), commit the other by hand.
    try:
        members["sync"].commit(asynchronous=False)
    except KafkaException as error:
        # Nothing read since the last commit is not an error for the test.
        if error.args[0].code() != -168:  # _NO_OFFSET
            raise
    for consumer in members.values():
        consumer.close()
    fill(bootstrap, topic, 4, 2, 10)
    restarted = member(bootstrap, topic, group_id, "restarted", strategy, False)
    tps = [TopicPartition(topic, p) for p in range(4)]
    resumed = {p: [] for p in range(4)}
    deadline = time.monotonic() + DEADLINE_S
    committed = None
    while time.monotonic() < deadline and sum(map(len, resumed.values())) < 8:
        message = restarted.poll(0.1)
        if message is None:
            continue
        if message.error():
            fail(f"restarted: {message.error()}")
        if committed is None:
            committed = {tp.partition: tp.offset for tp in restarted.committed(tps, timeout=10)}
        resumed[message.partition()].append(message.offset())
    restarted.commit(asynchronous=False)
    restarted.close()
    print(json.dumps({"assignments": assignments, "committed": committed, "resumed": resumed}))


def resume(bootstrap, topic, group_id):
    fill(bootstrap, topic, 4, 1, 12)
    consumer = member(bootstrap, topic, group_id, "after-restart", "default", False)
    resumed = {p: [] for p in range(4)}
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline and sum(map(len, resumed.values())) < 4:
        message = consumer.poll(0.1)
        if message is None:
            continue
        if message.error():
            fail(f"after restart: {message.error()}")
        resumed[message.partition()].append(message.offset())
    consumer.close()
    print(json.dumps({"resumed": resumed}))


def idempotent_restart(bootstrap, topic, count):
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 20})
    deliveries = Deliveries()
    for i in range(count):
        if i == count // 2:
            producer.flush(DEADLINE_S)
            # More in flight while the server goes away: retried after the restart.
            for j in range(i, i + 10):
                producer.produce(topic, partition=0, value=str(j), on_delivery=deliveries)
            producer.poll(0)
            print("restart", flush=True)
            sys.stdin.readline()
            continue
        if count // 2 < i < count // 2 + 10:
            continue
        producer.produce(topic, partition=0, value=str(i), on_delivery=deliveries)
        producer.poll(0)
    deliveries.check(producer, "idempotent producer across a restart")
    values = [int(m.value()) for m in read_from_beginning(bootstrap, topic, 0, count)]
    print(json.dumps({"values": values}))


def main():
    mode, bootstrap = sys.argv[1], sys.argv[2]
    args = sys.argv[3:]
    if mode == "admin":
        admin(bootstrap)
    elif mode == "produce":
        produce(bootstrap, args[0])
    elif mode == "group":
        group(bootstrap, args[0], args[1], args[2])
    elif mode == "resume":
        resume(bootstrap, args[0], args[1])
    elif mode == "idempotent-restart":
        idempotent_restart(bootstrap, args[0], int(args[1]))
    else:
        fail(f"unknown mode {mode}")


if __name__ == "__main__":
    main()

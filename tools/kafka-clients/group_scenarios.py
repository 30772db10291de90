#!/usr/bin/env python3
"""Consumer-group scenarios Kafka users run, with confluent-kafka (librdkafka), against
fencelog's Kafka listener.

Run by tests/kafka/kafka_group_scenarios.rs; prints one JSON object on stdout (and, for
`restart`, signal lines before it), diagnostics on stderr, and exits non-zero (with the reason
on stderr) when the client surfaces an error.

    group_scenarios.py revoke-commits BOOTSTRAP TOPIC GROUP STRATEGY
        TOPIC has 4 partitions. A producer thread sends records to every partition the whole
        time while members of GROUP join one by one: one member, then two, then three (STRATEGY
        is `default` or a partition.assignment.strategy such as cooperative-sticky). Auto-commit
        is off: each member's on_revoke callback commits what it consumed with
        commit(asynchronous=False), as the confluent-kafka docs suggest. Once three members
        share the topic the producer stops, the members read to the end, and close. Prints
        every commit error, per partition how many records were produced, the offsets read
        more than once or never, and the rebalance callbacks before the members closed.

    group_scenarios.py fetch-wait BOOTSTRAP TOPIC
        One small record is produced to partition 0 of TOPIC; then a Consumer with
        fetch.min.bytes=100000 and fetch.wait.max.ms=1500 is assigned the partition from the
        beginning. Prints the seconds from its first poll to the record.

    group_scenarios.py restart BOOTSTRAP TOPIC GROUP
        Two members of GROUP (default assignor) share TOPIC (4 partitions, 10 records each),
        read everything and commit. Then the script prints `restart` and waits for a line on
        stdin (the server restarts meanwhile), produces 10 more records per partition, and the
        members read them. Then it prints `check`, waits for a line again (the test looks at the
        group), and closes the members. Prints the rebalance callbacks that fired after the
        restart, commit errors, and the offsets read more than once or never.
"""

import json
import sys
import threading
import time
from collections import Counter

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition

DEADLINE_S = 60
PARTITIONS = 4


def fail(message):
    print(message, file=sys.stderr)
    sys.exit(1)


class Member:
    """A Consumer of the group that remembers what it read and what its callbacks did."""

    def __init__(self, bootstrap, topic, group, name, strategy, commit_on_revoke):
        config = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": name,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 500,
        }
        if strategy != "default":
            config["partition.assignment.strategy"] = strategy
        self.name = name
        self.consumer = Consumer(config)
        self.commit_on_revoke = commit_on_revoke
        self.read = []
        self.assignment = set()
        self.callbacks = []
        self.commit_errors = []
        self.consumer.subscribe([topic], on_assign=self.on_assign, on_revoke=self.on_revoke,
                                on_lost=self.on_lost)

    def on_assign(self, consumer, partitions):
        self.callbacks.append(["assign", sorted(p.partition for p in partitions)])
        self.assignment |= {p.partition for p in partitions}

    def on_revoke(self, consumer, partitions):
        self.callbacks.append(["revoke", sorted(p.partition for p in partitions)])
        if self.commit_on_revoke:
            self.commit()
        self.assignment -= {p.partition for p in partitions}

    def on_lost(self, consumer, partitions):
        self.callbacks.append(["lost", sorted(p.partition for p in partitions)])
        self.assignment -= {p.partition for p in partitions}

    def commit(self):
        """Commits what was read; nothing read since the last commit is not an error."""
        try:
            self.consumer.commit(asynchronous=False)
        except KafkaException as error:
            if error.args[0].code() != KafkaError._NO_OFFSET:
                self.commit_errors.append(f"{self.name}: {error}")

    def poll(self):
        message = self.consumer.poll(0.05)
        if message is None:
            return
        if message.error():
            if message.error().code() == KafkaError._PARTITION_EOF:
                return
            fail(f"{self.name}: {message.error()}")
        self.read.append((message.partition(), message.offset()))


def check_reads(members, produced):
    """The offsets read more than once, and those never read, per partition."""
    counts = Counter(read for member in members for read in member.read)
    twice = sorted([p, o] for (p, o), n in counts.items() if n > 1)
    never = sorted([p, o] for p in range(PARTITIONS) for o in range(produced[p])
                   if (p, o) not in counts)
    return twice, never


def read_everything(members, produced, deadline):
    while True:
        counts = Counter(p for member in members for (p, _) in set(member.read))
        if all(counts[p] >= produced[p] for p in range(PARTITIONS)):
            return
        if time.monotonic() > deadline:
            fail(f"timed out reading: read {dict(counts)} of {produced}")
        for member in members:
            member.poll()


class ContinuousProducer(threading.Thread):
    """Sends records to every partition in turn until stopped; any delivery error fails."""

    def __init__(self, bootstrap, topic):
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.topic = topic
        self.stopping = threading.Event()
        self.errors = []
        self.sent = 0

    def delivered(self, error, message):
        if error is not None:
            self.errors.append(str(error))

    def run(self):
        while not self.stopping.is_set():
            self.producer.produce(self.topic, partition=self.sent % PARTITIONS,
                                  value=str(self.sent), on_delivery=self.delivered)
            self.sent += 1
            self.producer.poll(0)
            time.sleep(0.005)

    def stop(self):
        self.stopping.set()
        self.join()
        remaining = self.producer.flush(DEADLINE_S)
        if self.errors or remaining:
            fail(f"delivery failed: {self.errors[:3]} ({remaining} undelivered)")
        return [len(range(p, self.sent, PARTITIONS)) for p in range(PARTITIONS)]


def revoke_commits(bootstrap, topic, group, strategy):
    producer = ContinuousProducer(bootstrap, topic)
    producer.start()
    members = []
    deadline = time.monotonic() + DEADLINE_S
    for count in (1, 2, 3):
        members.append(Member(bootstrap, topic, group, f"member-{count}", strategy, True))
        # Until the new member holds partitions and every partition is owned by one member.
        while True:
            owned = [p for member in members for p in member.assignment]
            if members[-1].assignment and sorted(owned) == list(range(PARTITIONS)) \
                    and len(members[-1].read) > 0:
                break
            if time.monotonic() > deadline:
                fail(f"timed out waiting for {count} members to share the topic: "
                     f"{[sorted(m.assignment) for m in members]}")
            for member in members:
                member.poll()
        # Read a while with this many members, the producer still going.
        settle = time.monotonic() + 1.0
        while time.monotonic() < settle:
            for member in members:
                member.poll()
    produced = producer.stop()
    read_everything(members, produced, deadline)
    # The callbacks of the rebalances while the group grew (closing revokes too).
    callbacks = {m.name: list(m.callbacks) for m in members}
    for member in members:
        member.commit()
        member.consumer.close()
    twice, never = check_reads(members, produced)
    print(json.dumps({
        "produced": produced,
        "commit_errors": [e for member in members for e in member.commit_errors],
        "read_twice": twice[:20],
        "never_read": never[:20],
        "assignments": {m.name: sorted(m.assignment) for m in members},
        "callbacks": callbacks,
    }))


def fetch_wait(bootstrap, topic):
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, partition=0, value=b"small")
    if producer.flush(DEADLINE_S):
        fail("the record was not delivered")
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "fetch-wait",
        "enable.auto.commit": False,
        "fetch.min.bytes": 100000,
        "fetch.wait.max.ms": 1500,
    })
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    started = time.monotonic()
    while time.monotonic() - started < DEADLINE_S:
        message = consumer.poll(0.05)
        if message is None:
            continue
        if message.error():
            fail(f"fetch: {message.error()}")
        waited = time.monotonic() - started
        consumer.close()
        print(json.dumps({"seconds": waited, "value": message.value().decode()}))
        return
    fail("the record never arrived")


def fill(bootstrap, topic, per_partition, first):
    producer = Producer({"bootstrap.servers": bootstrap})
    errors = []
    for partition in range(PARTITIONS):
        for i in range(first, first + per_partition):
            producer.produce(topic, partition=partition, value=f"{partition}-{i}",
                             on_delivery=lambda error, _: error and errors.append(str(error)))
    if producer.flush(DEADLINE_S) or errors:
        fail(f"fill: delivery failed: {errors[:3]}")


def wait_for_the_test(signal):
    print(signal, flush=True)
    sys.stdin.readline()


def restart(bootstrap, topic, group):
    fill(bootstrap, topic, 10, 0)
    members = [Member(bootstrap, topic, group, name, "default", False) for name in ("a", "b")]
    deadline = time.monotonic() + DEADLINE_S
    produced = [10] * PARTITIONS
    read_everything(members, produced, deadline)
    while not all(member.assignment for member in members):
        if time.monotonic() > deadline:
            fail("timed out waiting for both members to hold partitions")
        for member in members:
            member.poll()
    for member in members:
        member.commit()
    before = [len(member.callbacks) for member in members]
    wait_for_the_test("restart")
    fill(bootstrap, topic, 10, 10)
    produced = [20] * PARTITIONS
    deadline = time.monotonic() + DEADLINE_S
    read_everything(members, produced, deadline)
    # Keep heartbeating a little: a rebalance the restart caused would show by now.
    settle = time.monotonic() + 2.0
    while time.monotonic() < settle:
        for member in members:
            member.poll()
    for member in members:
        member.commit()
    wait_for_the_test("check")
    after = {m.name: m.callbacks[n:] for m, n in zip(members, before)}
    commit_errors = [e for member in members for e in member.commit_errors]
    for member in members:
        member.consumer.close()
    twice, never = check_reads(members, produced)
    print(json.dumps({
        "callbacks_after_restart": after,
        "commit_errors": commit_errors,
        "read_twice": twice[:20],
        "never_read": never[:20],
        "assignments": {m.name: sorted(m.assignment) for m in members},
    }))


def main():
    mode, bootstrap = sys.argv[1], sys.argv[2]
    args = sys.argv[3:]
    if mode == "revoke-commits":
        revoke_commits(bootstrap, *args)
    elif mode == "fetch-wait":
        fetch_wait(bootstrap, *args)
    elif mode == "restart":
        restart(bootstrap, *args)
    else:
        fail(f"unknown mode {mode}")


if __name__ == "__main__":
    main()

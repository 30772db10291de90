#!/usr/bin/env python3
"""KIP-848 consumer-protocol groups (`group.protocol=consumer`) with confluent-kafka
(librdkafka) against fencelog's Kafka listener: ConsumerGroupHeartbeat with server-side
assignment, and OffsetCommit/OffsetFetch v9 with member epochs.

Run by tests/kafka/kafka_kip848.rs; prints one JSON object on stdout, diagnostics on stderr,
and exits non-zero (with the reason on stderr) when the client surfaces an error.

    kip848_group.py read-100 BOOTSTRAP TOPIC GROUP
        100 records are produced to TOPIC (1 partition). One consumer of GROUP with
        group.protocol=consumer reads them from the beginning, commits synchronously, and
        closes. Prints how many it read, its commit errors, and the committed offset as a
        second consumer of the group reads it back.

    kip848_group.py join-leave BOOTSTRAP TOPIC GROUP ASSIGNOR
        TOPIC has 3 partitions. A producer thread sends records to every partition the whole
        time while members of GROUP (group.remote.assignor=ASSIGNOR) come and go: one member,
        then two, then three; then the second leaves. Each member commits what it read in its
        revoke callback and every second. Once the two left share the topic (every partition
        owned by exactly one of them) the producer stops and they read to the end. Prints the
        commit errors, per partition how many records were produced, the offsets never read,
        the final assignments, and the rebalance callbacks.
"""

import json
import sys
import threading
import time
from collections import Counter

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

DEADLINE_S = 90


def fail(message):
    print(message, file=sys.stderr)
    sys.exit(1)


def consumer_config(bootstrap, group, name, assignor=None):
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.protocol": "consumer",
        "client.id": name,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    if assignor:
        config["group.remote.assignor"] = assignor
    return config


class Member:
    """A consumer of the group that remembers what it read, what it owns and its callbacks."""

    def __init__(self, bootstrap, topic, group, name, assignor):
        self.name = name
        self.consumer = Consumer(consumer_config(bootstrap, group, name, assignor))
        self.read = []
        self.assignment = set()
        self.callbacks = []
        self.commit_errors = []
        self.last_commit = time.monotonic()
        self.consumer.subscribe([topic], on_assign=self.on_assign, on_revoke=self.on_revoke,
                                on_lost=self.on_lost)

    def on_assign(self, consumer, partitions):
        self.callbacks.append(["assign", sorted(p.partition for p in partitions)])
        self.assignment |= {p.partition for p in partitions}

    def on_revoke(self, consumer, partitions):
        self.callbacks.append(["revoke", sorted(p.partition for p in partitions)])
        self.commit()
        self.assignment -= {p.partition for p in partitions}

    def on_lost(self, consumer, partitions):
        self.callbacks.append(["lost", sorted(p.partition for p in partitions)])
        self.assignment -= {p.partition for p in partitions}

    def commit(self):
        """Commits what was read; nothing read since the last commit is not an error."""
        self.last_commit = time.monotonic()
        try:
            self.consumer.commit(asynchronous=False)
        except KafkaException as error:
            if error.args[0].code() != KafkaError._NO_OFFSET:
                self.commit_errors.append(f"{self.name}: {error}")

    def poll(self):
        message = self.consumer.poll(0.05)
        if time.monotonic() - self.last_commit > 1.0:
            self.commit()
        if message is None:
            return
        if message.error():
            if message.error().code() == KafkaError._PARTITION_EOF:
                return
            fail(f"{self.name}: {message.error()}")
        self.read.append((message.partition(), message.offset()))

    def close(self):
        self.commit()
        self.consumer.close()


class ContinuousProducer(threading.Thread):
    """Sends records to every partition in turn until stopped; any delivery error fails."""

    def __init__(self, bootstrap, topic, partitions):
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.topic = topic
        self.partitions = partitions
        self.stopping = threading.Event()
        self.errors = []
        self.produced = Counter()

    def delivered(self, error, message):
        if error is not None:
            self.errors.append(str(error))
        else:
            self.produced[message.partition()] += 1

    def run(self):
        n = 0
        while not self.stopping.is_set():
            self.producer.produce(self.topic, value=f"r{n}".encode(),
                                  partition=n % self.partitions, on_delivery=self.delivered)
            self.producer.poll(0)
            n += 1
            time.sleep(0.01)
        self.producer.flush(30)


def read_100(bootstrap, topic, group):
    producer = Producer({"bootstrap.servers": bootstrap})
    for n in range(100):
        producer.produce(topic, value=f"record {n}".encode(), partition=0)
    if producer.flush(30) != 0:
        fail("records not delivered")
    consumer = Consumer(consumer_config(bootstrap, group, "reader"))
    consumer.subscribe([topic])
    values = []
    deadline = time.monotonic() + DEADLINE_S
    while len(values) < 100:
        if time.monotonic() > deadline:
            fail(f"timed out: read {len(values)} of 100")
        message = consumer.poll(0.2)
        if message is None:
            continue
        if message.error():
            fail(f"reader: {message.error()}")
        values.append(message.value().decode())
    errors = []
    try:
        consumer.commit(asynchronous=False)
    except KafkaException as error:
        errors.append(str(error))
    committed = consumer.committed([TopicPartition(topic, 0)], timeout=10)
    consumer.close()
    print(json.dumps({
        "read": len(values),
        "in_order": values == [f"record {n}" for n in range(100)],
        "commit_errors": errors,
        "committed": committed[0].offset,
    }))


def converged(members, partitions):
    owned = Counter(p for member in members for p in member.assignment)
    return sorted(owned) == list(range(partitions)) and all(n == 1 for n in owned.values())


def settle(members, partitions, deadline, why):
    while not converged(members, partitions):
        if time.monotonic() > deadline:
            fail(f"timed out waiting for {why}: "
                 + ", ".join(f"{m.name} owns {sorted(m.assignment)}" for m in members))
        for member in members:
            member.poll()


def join_leave(bootstrap, topic, group, assignor):
    partitions = 3
    deadline = time.monotonic() + DEADLINE_S
    producer = ContinuousProducer(bootstrap, topic, partitions)
    producer.start()
    names = iter(["m1", "m2", "m3"])
    members = [Member(bootstrap, topic, group, next(names), assignor)]
    settle(members, partitions, deadline, "the first member")
    for _ in range(2):
        members.append(Member(bootstrap, topic, group, next(names), assignor))
        # Every member takes part: the newcomer gets partitions once others revoked them.
        while not all(member.assignment for member in members):
            if time.monotonic() > deadline:
                fail("timed out waiting for the new member's partitions: "
                     + ", ".join(f"{m.name} owns {sorted(m.assignment)}" for m in members))
            for member in members:
                member.poll()
        settle(members, partitions, deadline, f"{len(members)} members")
    leaving = members.pop(1)
    left_read = leaving.read
    leaving.close()
    settle(members, partitions, deadline, "the members left after one left")
    producer.stopping.set()
    producer.join()
    if producer.errors:
        fail(f"produce errors: {producer.errors}")
    produced = [producer.produced[p] for p in range(partitions)]
    everyone = members + [leaving]
    while True:
        seen = {read for member in everyone for read in member.read}
        counts = Counter(p for (p, _) in seen)
        if all(counts[p] >= produced[p] for p in range(partitions)):
            break
        if time.monotonic() > deadline + 30:
            fail(f"timed out reading: read {dict(counts)} of {produced}")
        for member in members:
            member.poll()
    final = {member.name: sorted(member.assignment) for member in members}
    for member in members:
        member.close()
    seen = {read for member in everyone for read in member.read} | set(left_read)
    never = sorted([p, o] for p in range(partitions) for o in range(produced[p])
                   if (p, o) not in seen)
    print(json.dumps({
        "commit_errors": [e for member in everyone for e in member.commit_errors],
        "produced": produced,
        "never_read": never,
        "final_assignment": final,
        "callbacks": {member.name: member.callbacks for member in everyone},
    }))


def main():
    if len(sys.argv) < 2:
        fail(__doc__)
    scenario, args = sys.argv[1], sys.argv[2:]
    if scenario == "read-100" and len(args) == 3:
        read_100(*args)
    elif scenario == "join-leave" and len(args) == 4:
        join_leave(*args)
    else:
        fail(__doc__)


if __name__ == "__main__":
    main()

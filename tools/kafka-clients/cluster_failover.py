#!/usr/bin/env python3
"""confluent-kafka against a three-broker fencelog cluster's Kafka listeners.

Usage: cluster_failover.py BOOTSTRAP TOPIC RECORDS PIDS

PIDS is `node=pid,node=pid,...` of the brokers. The script:
1. creates TOPIC with CreateTopics (3 partitions, replication factor 3, min.insync.replicas=2);
2. waits until Metadata shows brokers 1, 2, 3 and three in-sync replicas on every partition,
   with a leader epoch;
3. produces RECORDS values to partition 0 with an idempotent acks=all producer and, a third of
   the way in, kills the leader of partition 0 with SIGKILL (taken from Metadata);
4. checks every value was delivered without an error, then reads partition 0 back from the
   new leader: every value exactly once, in the order sent.

Prints one line per check and `ok` at the end; exits non-zero with the reason otherwise.
"""

import os
import signal
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def fail(message):
    print(f"FAIL: {message}", flush=True)
    sys.exit(1)


def wait_for(what, check, timeout=60.0):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            result = check()
            if result:
                return result
        except KafkaException as error:  # a broker between elections
            last = error
        time.sleep(0.2)
    fail(f"timed out waiting for {what} (last error: {last})")


def main():
    bootstrap, topic, records, pids = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    pid_of = {int(node): int(pid) for node, pid in (p.split("=") for p in pids.split(","))}

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=3, replication_factor=3,
                  config={"min.insync.replicas": "2"})],
        request_timeout=30,
    )
    futures[topic].result(timeout=60)
    print("created", flush=True)

    def full_isr():
        metadata = admin.list_topics(topic, timeout=10)
        brokers = sorted(metadata.brokers)
        partitions = metadata.topics[topic].partitions
        if brokers != [1, 2, 3] or len(partitions) != 3:
            return None
        for partition in partitions.values():
            if partition.error is not None or len(partition.isrs) != 3 or partition.leader < 1:
                return None
        return metadata

    metadata = wait_for("three brokers and full ISRs", full_isr)
    leader = metadata.topics[topic].partitions[0].leader
    print(f"brokers {sorted(metadata.brokers)}, isr 3, leader of p0 {leader}", flush=True)

    producer = Producer({
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "message.timeout.ms": 120000,
        "retry.backoff.ms": 100,
    })
    errors = []
    delivered = []

    def on_delivery(error, message):
        if error is not None:
            errors.append(str(error))
        else:
            delivered.append(message.value().decode())

    killed = False
    for i in range(records):
        if not killed and i == records // 3:
            producer.flush(60)
            os.kill(pid_of[leader], signal.SIGKILL)
            killed = True
            print(f"killed broker {leader}", flush=True)
        while True:
            try:
                producer.produce(topic, value=f"v{i}".encode(), partition=0,
                                 on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    remaining = producer.flush(120)
    if remaining:
        fail(f"{remaining} records never delivered")
    if errors:
        fail(f"delivery errors: {errors[:5]}")
    if len(delivered) != records:
        fail(f"{len(delivered)} of {records} delivered")
    print(f"delivered {records} without an error", flush=True)

    def new_leader():
        metadata = admin.list_topics(topic, timeout=10)
        partition = metadata.topics[topic].partitions[0]
        return partition.leader if partition.leader not in (-1, leader) else None

    moved = wait_for("a new leader of p0", new_leader)
    print(f"new leader of p0 {moved}", flush=True)

    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"check-{topic}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    })
    consumer.assign([TopicPartition(topic, 0, 0)])
    values = []
    deadline = time.time() + 60
    while len(values) < records and time.time() < deadline:
        message = consumer.poll(1.0)
        if message is None:
            continue
        if message.error():
            continue
        values.append(message.value().decode())
    consumer.close()
    expected = [f"v{i}" for i in range(records)]
    if values != expected:
        missing = sorted(set(expected) - set(values))
        duplicates = len(values) - len(set(values))
        fail(f"read {len(values)} values: missing {missing[:10]}, {duplicates} duplicates")
    print(f"read back {records}: each once, in order", flush=True)
    print("ok", flush=True)


if __name__ == "__main__":
    main()

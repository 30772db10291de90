#!/usr/bin/env python3
"""A consumer group's committed offsets through a kill -9 of its coordinator (confluent-kafka
against a three-broker fencelog cluster's Kafka listeners).

Usage: cluster_group_failover.py BOOTSTRAP TOPIC RECORDS PIDS [PROTOCOL]

PROTOCOL is the consumers' `group.protocol`: `classic` (the default) or `consumer` (KIP-848).

PIDS is `node=pid,node=pid,...` of the brokers. The script:
1. creates TOPIC (3 partitions, replication factor 3, min.insync.replicas=2) and waits for
   full ISRs;
2. produces RECORDS values spread over the partitions (idempotent, acks=all);
3. consumes them all in group `billing` (subscribe, so the group rebalances and is stable),
   commits synchronously and reads the committed offsets back;
4. asks DescribeConsumerGroups for the group's coordinator and kills it with SIGKILL;
5. from a new consumer of the same group: the committed offsets are unchanged (waiting while
   the group moves to the new leader of its offsets partition), and after 30 more records are
   produced the group reads exactly those, from where it had committed;
6. DeleteGroups deletes the group (now without members) and its committed offsets.

Prints one line per check and `ok` at the end; exits non-zero with the reason otherwise.
"""

import os
import signal
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

GROUP = "billing"
PARTITIONS = 3


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
        except KafkaException as error:  # a broker between elections, a group moving
            last = error
        time.sleep(0.2)
    fail(f"timed out waiting for {what} (last error: {last})")


def produce(bootstrap, topic, values):
    producer = Producer({
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "message.timeout.ms": 60000,
    })
    errors = []

    def on_delivery(error, _message):
        if error is not None:
            errors.append(str(error))

    for index, value in enumerate(values):
        producer.produce(topic, value=value.encode(), partition=index % PARTITIONS,
                         on_delivery=on_delivery)
        producer.poll(0)
    if producer.flush(60) or errors:
        fail(f"produce failed: {errors[:5]}")


PROTOCOL = "classic"


def consumer_of(bootstrap):
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": GROUP,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }
    if PROTOCOL == "consumer":
        # The broker sets the session timeout of consumer-protocol members.
        config["group.protocol"] = "consumer"
    else:
        config["session.timeout.ms"] = 10000
    return Consumer(config)


def consume(consumer, count, timeout=60.0):
    values = []
    deadline = time.time() + timeout
    while len(values) < count and time.time() < deadline:
        message = consumer.poll(0.5)
        if message is None or message.error():
            continue
        values.append(message.value().decode())
    return values


def main():
    global PROTOCOL
    bootstrap, topic, records, pids = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    if len(sys.argv) > 5:
        PROTOCOL = sys.argv[5]
    pid_of = {int(node): int(pid) for node, pid in (p.split("=") for p in pids.split(","))}

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=PARTITIONS, replication_factor=3,
                  config={"min.insync.replicas": "2"})],
        request_timeout=30,
    )
    futures[topic].result(timeout=60)

    def full_isr():
        partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
        return len(partitions) == PARTITIONS and all(
            p.error is None and len(p.isrs) == 3 and p.leader > 0 for p in partitions.values())

    wait_for("full ISRs", full_isr)
    produce(bootstrap, topic, [f"v{i}" for i in range(records)])
    print(f"produced {records}", flush=True)

    consumer = consumer_of(bootstrap)
    consumer.subscribe([topic])
    values = consume(consumer, records)
    if sorted(values) != sorted(f"v{i}" for i in range(records)):
        fail(f"the group read {len(values)} of {records} values")
    consumer.commit(asynchronous=False)
    wanted = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    committed = {tp.partition: tp.offset for tp in consumer.committed(wanted, timeout=30)}
    if sum(committed.values()) != records:
        fail(f"committed offsets {committed} do not add up to {records}")
    print(f"committed {committed}", flush=True)

    def coordinator():
        description = admin.describe_consumer_groups([GROUP])[GROUP].result(timeout=10)
        return description.coordinator.id if description.coordinator else None

    coordinator_id = wait_for("the group's coordinator", coordinator)
    consumer.close()
    os.kill(pid_of[coordinator_id], signal.SIGKILL)
    print(f"killed the coordinator, broker {coordinator_id}", flush=True)

    survivors = ",".join(
        address for address, node in zip(bootstrap.split(","), sorted(pid_of))
        if node != coordinator_id)
    resumed = consumer_of(survivors)

    def committed_again():
        answer = resumed.committed(wanted, timeout=10)
        if any(tp.error for tp in answer):
            return None
        return {tp.partition: tp.offset for tp in answer}

    after = wait_for("the committed offsets from the new coordinator", committed_again, 90)
    if after != committed:
        fail(f"committed offsets changed across the coordinator's crash: {committed} -> {after}")
    moved = wait_for("the group's new coordinator", coordinator)
    if moved == coordinator_id:
        fail(f"the group is still coordinated by the killed broker {moved}")
    print(f"committed offsets unchanged, now coordinated by broker {moved}", flush=True)

    more = [f"w{i}" for i in range(30)]
    produce(survivors, topic, more)
    resumed.subscribe([topic])
    values = consume(resumed, len(more), 90)
    if sorted(values) != sorted(more):
        fail(f"the resumed group read {values[:10]}... ({len(values)}), not just the 30 new values")
    resumed.close()
    print("the group resumed where it had committed", flush=True)

    # DeleteGroups on a cluster: the admin finds the coordinator, which deletes the group and
    # its offsets in its offsets partition; a new consumer of the group has no position.
    survivor_admin = AdminClient({"bootstrap.servers": survivors})

    def deleted():
        try:
            survivor_admin.delete_consumer_groups([GROUP], request_timeout=10)[GROUP].result()
            return True
        except KafkaException as error:
            if error.args[0].name() == "NON_EMPTY_GROUP":  # the closed member's leave in flight
                return None
            raise

    wait_for("the group's deletion", deleted)
    fresh = consumer_of(survivors)
    gone = fresh.committed(wanted, timeout=30)
    fresh.close()
    if any(tp.offset >= 0 for tp in gone):
        fail(f"the deleted group still has committed offsets: {gone}")
    print("deleted the group: no committed offsets left", flush=True)
    print("ok", flush=True)


if __name__ == "__main__":
    main()

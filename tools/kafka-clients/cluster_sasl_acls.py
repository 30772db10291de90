#!/usr/bin/env python3
"""confluent-kafka with SASL/SCRAM-SHA-256 against a secured three-broker fencelog cluster
(`serve --etcd --auth --broker-user broker`), as a user limited by ACLs.

Usage: cluster_sasl_acls.py BOOTSTRAP USER PASSWORD TOPIC REFUSED_TOPIC RECORDS

USER may create, produce and consume TOPIC (`acl add --topic 'sec-*'`) and nothing on
REFUSED_TOPIC. The script:
1. checks that a client without credentials gets no metadata (its Metadata request closes the
   connection, so listing topics fails);
2. as USER, creates TOPIC with CreateTopics (1 partition, replication factor 3,
   min.insync.replicas=2) and waits until Metadata shows brokers 1, 2, 3 and three in-sync
   replicas;
3. produces RECORDS values with an idempotent acks=all producer: every one delivered without
   an error, then reads them back (every value once, in order);
4. produces one record to REFUSED_TOPIC: refused with TOPIC_AUTHORIZATION_FAILED.

Prints one line per check and `ok` at the end; exits non-zero with the reason otherwise.
"""

import sys
import time

from confluent_kafka import (OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer,
                             TopicPartition)
from confluent_kafka.admin import AdminClient, NewTopic


def fail(message):
    print(f"FAIL: {message}", flush=True)
    sys.exit(1)


def wait_for(what, check, timeout=30.0):
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


def unauthenticated_gets_no_metadata(bootstrap):
    anonymous = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    try:
        metadata = anonymous.list_topics(timeout=3)
    except KafkaException as error:
        print(f"unauthenticated: no metadata ({error.args[0].name()})", flush=True)
        return
    fail(f"a client without credentials read metadata: {sorted(metadata.topics)}")


def main():
    bootstrap, user, password, topic, refused_topic, records = sys.argv[1:7]
    records = int(records)
    unauthenticated_gets_no_metadata(bootstrap)

    sasl = {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": user,
        "sasl.password": password,
    }
    admin = AdminClient(sasl)
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=1, replication_factor=3,
                  config={"min.insync.replicas": "2"})],
        request_timeout=30,
    )
    futures[topic].result(timeout=30)
    print("created", flush=True)

    def full_isr():
        metadata = admin.list_topics(topic, timeout=10)
        if sorted(metadata.brokers) != [1, 2, 3]:
            return False
        described = metadata.topics[topic]
        if described.error is not None or not described.partitions:
            return False
        return all(len(p.isrs) == 3 and p.leader in (1, 2, 3)
                   for p in described.partitions.values())

    wait_for("three in-sync replicas", full_isr)
    print("full isr", flush=True)

    errors = []

    def delivered(error, _message):
        if error is not None:
            errors.append(error)

    producer = Producer({**sasl, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                         "message.timeout.ms": 20000})
    sent = [f"secret-{i}" for i in range(records)]
    for value in sent:
        producer.produce(topic, value=value, partition=0, on_delivery=delivered)
        producer.poll(0)
    if producer.flush(30) != 0:
        fail("records still undelivered after 30 s")
    if errors:
        fail(f"delivery errors: {errors[:3]}")
    print(f"delivered {records}", flush=True)

    consumer = Consumer({**sasl, "group.id": "sec-assign-only", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    read = []
    deadline = time.time() + 30
    while len(read) < records and time.time() < deadline:
        message = consumer.poll(1)
        if message is None or message.error():
            continue
        read.append(message.value().decode())
    consumer.close()
    if read != sent:
        fail(f"read back {len(read)} values, not the {records} sent in order: {read[:5]}...")
    print(f"read back {records}", flush=True)

    refusals = []

    def refused(error, _message):
        refusals.append(error)

    other = Producer({**sasl, "acks": "all", "message.timeout.ms": 10000,
                      "error_cb": refusals.append})
    other.produce(refused_topic, value="not allowed", on_delivery=refused)
    other.flush(15)
    codes = {error.code() for error in refusals if error is not None}
    if KafkaError.TOPIC_AUTHORIZATION_FAILED not in codes:
        fail(f"a write to {refused_topic} was not refused as not authorized: {refusals}")
    print("refused: TOPIC_AUTHORIZATION_FAILED", flush=True)
    print("ok", flush=True)


if __name__ == "__main__":
    main()

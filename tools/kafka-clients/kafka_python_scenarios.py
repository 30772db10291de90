#!/usr/bin/env python3
"""Ordinary kafka-python code against fencelog's Kafka listener.

Run by tests/kafka/kafka_client_scenarios.rs; prints one JSON object on stdout, diagnostics on stderr,
and exits non-zero when the client raises.

    kafka_python_scenarios.py produce-consume BOOTSTRAP TOPIC
        KafkaAdminClient creates TOPIC (2 partitions), lists and describes it; the default
        (idempotent) KafkaProducer with linger_ms sends 10 records with keys and headers; a
        KafkaConsumer with auto_offset_reset='earliest' reads them, then seek_to_beginning,
        end_offsets, beginning_offsets and offsets_for_times are asked. Prints what it saw.

    kafka_python_scenarios.py groups BOOTSTRAP TOPIC GROUP
        A KafkaConsumer of GROUP subscribes to TOPIC and reads it (committing), and while it is
        a member KafkaAdminClient's list_groups, describe_groups and list_group_offsets are
        asked; then it closes and they are asked again. Prints both views.

    kafka_python_scenarios.py idempotent-restart BOOTSTRAP TOPIC COUNT
        The default (idempotent) KafkaProducer sends COUNT records to partition 0; halfway it
        prints `restart` and waits for a line on stdin while records are in flight (the test
        restarts the server). Every send must succeed; prints the values read back in order.
"""

import json
import sys
import time

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

DEADLINE_S = 30


def produce_consume(bootstrap, topic):
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, 2, 1)])
    listed = topic in admin.list_topics()
    described = admin.describe_topics([topic])
    partitions = sorted(p["partition_index"] for p in described[0]["partitions"])
    admin.close()
    before = int(time.time() * 1000) - 1
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=50)
    futures = [
        producer.send(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % 2,
                      headers=[("index", str(i).encode())])
        for i in range(10)
    ]
    producer.flush(DEADLINE_S)
    offsets = [future.get(timeout=DEADLINE_S).offset for future in futures]
    producer.close()

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=None,
                             auto_offset_reset="earliest", consumer_timeout_ms=DEADLINE_S * 1000)
    first = []
    for m in consumer:
        first.append((m.partition, m.offset, m.key.decode(), m.value.decode(),
                      [[k, v.decode()] for k, v in m.headers]))
        if len(first) == 10:
            break
    first.sort()
    consumer.close()
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             consumer_timeout_ms=DEADLINE_S * 1000)
    consumer.assign(tps)
    consumer.seek_to_beginning()
    again = 0
    for _ in consumer:
        again += 1
        if again == 10:
            break
    end = {tp.partition: offset for tp, offset in consumer.end_offsets(tps).items()}
    beginning = {tp.partition: offset for tp, offset in consumer.beginning_offsets(tps).items()}
    by_time = consumer.offsets_for_times({tp: before for tp in tps})
    future = consumer.offsets_for_times({tp: int(time.time() * 1000) + 60_000 for tp in tps})
    consumer.close()
    print(json.dumps({
        "listed": listed, "partitions": partitions, "offsets": offsets, "first": first,
        "again": again, "end": end, "beginning": beginning,
        "by_time": {tp.partition: found.offset for tp, found in by_time.items()},
        "future": {tp.partition: found for tp, found in future.items()},
    }))


def admin_view(admin, group, topic):
    listed = sorted((g["group_id"], g.get("group_state"), g["protocol_type"])
                    for g in admin.list_groups())
    described = admin.describe_groups([group])[group]
    offsets = admin.list_group_offsets(group)[group]
    return {
        "listed": [list(row) for row in listed if row[0] == group],
        "state": described["group_state"],
        "protocol": described["protocol_data"],
        "members": [
            {"client_id": m["client_id"], "client_host": m["client_host"],
             "topics": m["member_metadata"]["topics"],
             "assigned": sorted(p for a in m["member_assignment"]["assigned_partitions"]
                                for p in a["partitions"])}
            for m in described["members"]
        ],
        "offsets": {tp.partition: meta.offset for tp, meta in offsets.items() if tp.topic == topic},
    }


def groups(bootstrap, topic, group):
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                             client_id="py-member", auto_offset_reset="earliest",
                             session_timeout_ms=6000, heartbeat_interval_ms=300)
    read = 0
    deadline = time.monotonic() + DEADLINE_S
    while read < 10 and time.monotonic() < deadline:
        read += sum(len(records) for records in consumer.poll(timeout_ms=200).values())
    consumer.commit()
    member = admin_view(admin, group, topic)
    consumer.close()
    after = admin_view(admin, group, topic)
    admin.close()
    print(json.dumps({"read": read, "member": member, "after": after}))


def idempotent_restart(bootstrap, topic, count):
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
    futures = []
    for i in range(count):
        futures.append(producer.send(topic, value=str(i).encode(), partition=0))
        if i == count // 2:
            print("restart", flush=True)
            sys.stdin.readline()
    producer.flush(DEADLINE_S)
    for future in futures:
        future.get(timeout=DEADLINE_S)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             consumer_timeout_ms=3000)
    partition = TopicPartition(topic, 0)
    consumer.assign([partition])
    consumer.seek_to_beginning(partition)
    # Reads past `count` for up to 3 s too: a duplicate would show there.
    values = [int(m.value) for m in consumer]
    consumer.close()
    print(json.dumps({"values": values}))


def main():
    mode, bootstrap = sys.argv[1], sys.argv[2]
    args = sys.argv[3:]
    if mode == "produce-consume":
        produce_consume(bootstrap, args[0])
    elif mode == "groups":
        groups(bootstrap, args[0], args[1])
    elif mode == "idempotent-restart":
        idempotent_restart(bootstrap, args[0], int(args[1]))
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()

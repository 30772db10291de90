#!/usr/bin/env python3
"""Group admin calls of real Kafka clients against fencelog's Kafka listener.

Usage: admin_groups.py BOOTSTRAP TOPIC

TOPIC must exist with one partition holding at least one record. Prints one JSON object with
what each step saw; exits non-zero with a message when a step does not behave as Kafka's broker
would:

- confluent-kafka (librdkafka): a consumer of group `cf-doomed` commits and closes;
  `AdminClient.delete_consumer_groups` deletes the group, which then is no longer listed and has
  no committed offsets; deleting it again fails with GROUP_ID_NOT_FOUND; deleting a group with a
  live member fails with NON_EMPTY_GROUP.
- kafka-python 3.x (pure Python): `describe_cluster` (DescribeCluster) names the broker;
  `delete_group_offsets` (OffsetDelete) removes one group's committed offset; `delete_groups`
  removes a group.
"""

import json
import sys
import time


def fail(message):
    print(f"FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def consume_and_commit(bootstrap, topic, group, close=True):
    from confluent_kafka import Consumer

    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    })
    consumer.subscribe([topic])
    deadline = time.time() + 30
    while time.time() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            consumer.commit(message=message, asynchronous=False)
            break
    else:
        fail(f"{group}: no record read within 30 s")
    if close:
        consumer.close()
        return None
    return consumer


def confluent(bootstrap, topic):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    seen = {}
    consume_and_commit(bootstrap, topic, "cf-doomed")
    busy = consume_and_commit(bootstrap, topic, "cf-busy", close=False)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_consumer_groups(["cf-doomed"], request_timeout=15)
    futures["cf-doomed"].result()
    seen["deleted"] = "cf-doomed"
    listed = admin.list_consumer_groups(request_timeout=15).result()
    ids = sorted(group.group_id for group in listed.valid)
    seen["listed_after"] = ids
    if "cf-doomed" in ids:
        fail(f"the deleted group is still listed: {ids}")
    for group, expected in [("cf-doomed", "GROUP_ID_NOT_FOUND"), ("cf-busy", "NON_EMPTY_GROUP")]:
        try:
            admin.delete_consumer_groups([group], request_timeout=15)[group].result()
            fail(f"deleting {group} succeeded; expected {expected}")
        except KafkaException as error:
            name = error.args[0].name()
            seen[f"delete_{group}"] = name
            if name != expected:
                fail(f"deleting {group}: {name}, expected {expected}")
    busy.close()
    return seen


def kafka_python(bootstrap, topic):
    from kafka import KafkaConsumer, TopicPartition
    from kafka.admin import KafkaAdminClient

    seen = {}
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    cluster = admin.describe_cluster()
    brokers = [broker.get("broker_id", broker.get("node_id")) for broker in cluster["brokers"]]
    seen["describe_cluster_brokers"] = brokers
    if len(brokers) != 1:
        fail(f"describe_cluster: {cluster}")
    partition = TopicPartition(topic, 0)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id="kp-offsets",
                             enable_auto_commit=False)
    consumer.assign([partition])
    from kafka.structs import OffsetAndMetadata
    consumer.commit({partition: OffsetAndMetadata(1, "", -1)})
    consumer.close()
    # kafka-python 3 answers {group: {partition: offset}}; 2.x answered {partition: offset}.
    def offsets_of(group):
        listed = admin.list_group_offsets(group)
        return listed.get(group, listed) if isinstance(listed, dict) else listed

    before = offsets_of("kp-offsets")
    seen["offsets_before"] = len(before)
    if partition not in before:
        fail(f"the commit is not there: {before}")
    result = admin.delete_group_offsets("kp-offsets", [partition])
    seen["delete_group_offsets"] = {str(key): str(value) for key, value in result.items()}
    after = offsets_of("kp-offsets")
    seen["offsets_after"] = len(after)
    if partition in after and after[partition].offset >= 0:
        fail(f"the offset is still there: {after}")
    deleted = admin.delete_groups(["kp-offsets"])
    # kafka-python 3 answers {group: error}; 2.x a list of (group, error).
    pairs = deleted.items() if isinstance(deleted, dict) else deleted
    seen["delete_groups"] = [(group, str(error)) for group, error in pairs]
    admin.close()
    return seen


def main():
    if len(sys.argv) != 3:
        fail(__doc__)
    bootstrap, topic = sys.argv[1:]
    print(json.dumps({"confluent": confluent(bootstrap, topic),
                      "kafka_python": kafka_python(bootstrap, topic)}))


if __name__ == "__main__":
    main()

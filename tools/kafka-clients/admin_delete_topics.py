#!/usr/bin/env python3
"""Ordinary Kafka admin code against fencelog's Kafka listener: create a topic, see it listed,
delete it, and see it no longer listed.

Usage: admin_delete_topics.py BOOTSTRAP TOPIC CLIENT

CLIENT is `kafka-python` (KafkaAdminClient) or `confluent` (confluent-kafka's AdminClient,
librdkafka). Prints `created`, `listed`, `deleted` and `not listed`, one per line, as each step
succeeds; exits non-zero (with the reason on stderr) at the first step that fails.
"""

import sys
import time

ATTEMPTS = 50


def kafka_python(bootstrap, topic):
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="fencelog-admin-test")
    admin.create_topics([NewTopic(name=topic, num_partitions=2, replication_factor=1)])
    print("created", flush=True)
    return admin.list_topics, lambda: admin.delete_topics([topic], timeout_ms=30000)


def confluent(bootstrap, topic):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 2, 1)]).values():
        future.result(30)
    print("created", flush=True)

    def listed():
        return list(admin.list_topics(timeout=10).topics)

    def delete():
        for future in admin.delete_topics([topic], operation_timeout=30).values():
            future.result(30)

    return listed, delete


def eventually(condition):
    for _ in range(ATTEMPTS):
        if condition():
            return True
        time.sleep(0.1)
    return False


def main():
    bootstrap, topic, client = sys.argv[1:4]
    clients = {"kafka-python": kafka_python, "confluent": confluent}
    if client not in clients:
        sys.exit(f"unknown client {client!r}: use one of {sorted(clients)}")
    listed, delete = clients[client](bootstrap, topic)
    if not eventually(lambda: topic in listed()):
        sys.exit(f"{topic} was created but is not listed: {listed()}")
    print("listed", flush=True)
    delete()
    print("deleted", flush=True)
    if not eventually(lambda: topic not in listed()):
        sys.exit(f"{topic} was deleted but is still listed")
    print("not listed", flush=True)


if __name__ == "__main__":
    main()

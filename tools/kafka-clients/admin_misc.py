#!/usr/bin/env python3
"""ACL, log directory and producer admin calls of real Kafka clients against fencelog.

Usage: admin_misc.py PLAIN_BOOTSTRAP AUTH_BOOTSTRAP SUPER_USER PASSWORD

PLAIN_BOOTSTRAP is a server without --auth; AUTH_BOOTSTRAP one with --auth on which SUPER_USER
(with PASSWORD) is a super user. Prints one JSON object with what each step saw; exits non-zero
with a message when a step does not behave as Kafka's broker would:

- confluent-kafka (librdkafka): on the --auth server, over SASL/SCRAM-SHA-256,
  `AdminClient.create_acls` creates two bindings (READ on a literal topic, WRITE on a prefix),
  `describe_acls` lists them, `delete_acls` removes them (and a DENY binding is refused); on the
  server without --auth, `create_acls` fails with SECURITY_DISABLED.
- kafka-python 3.x: on the server without --auth, an idempotent producer writes a two-partition
  topic; `describe_log_dirs` names the data directory and both partitions (the written one with
  bytes), `describe_producers` lists the producer, `describe_acls` fails with SECURITY_DISABLED.
"""

import json
import sys
import time

TOPIC = "admin-misc"


def fail(message):
    print(f"FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def confluent(plain, auth, user, password):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation,
                                       AclPermissionType, AdminClient, ResourcePatternType,
                                       ResourceType)

    seen = {}
    admin = AdminClient({
        "bootstrap.servers": auth,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": user,
        "sasl.password": password,
    })
    bindings = [
        AclBinding(ResourceType.TOPIC, "cf-orders", ResourcePatternType.LITERAL,
                   "User:carol", "*", AclOperation.READ, AclPermissionType.ALLOW),
        AclBinding(ResourceType.TOPIC, "cf-logs-", ResourcePatternType.PREFIXED,
                   "User:carol", "*", AclOperation.WRITE, AclPermissionType.ALLOW),
    ]
    created = 0
    for binding, future in admin.create_acls(bindings, request_timeout=15).items():
        future.result()
        created += 1
    seen["created"] = created
    deny = AclBinding(ResourceType.TOPIC, "cf-orders", ResourcePatternType.LITERAL,
                      "User:carol", "*", AclOperation.READ, AclPermissionType.DENY)
    try:
        for future in admin.create_acls([deny], request_timeout=15).values():
            future.result()
        fail("a DENY binding was accepted")
    except KafkaException as error:
        seen["deny"] = error.args[0].name()
    carol = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:carol",
                             None, AclOperation.ANY, AclPermissionType.ANY)
    described = admin.describe_acls(carol, request_timeout=15).result()
    names = sorted((b.name, b.resource_pattern_type.name, b.operation.name) for b in described)
    if names != [("cf-logs-", "PREFIXED", "WRITE"), ("cf-orders", "LITERAL", "READ")]:
        fail(f"describe_acls listed {names}")
    seen["described"] = len(described)
    deleted = 0
    for future in admin.delete_acls([carol], request_timeout=15).values():
        deleted += len(future.result())
    seen["deleted"] = deleted
    if admin.describe_acls(carol, request_timeout=15).result():
        fail("ACLs left after delete_acls")

    # librdkafka reports DescribeAcls' top-level error only through the bindings it returns
    # (none here), so SECURITY_DISABLED is checked with create_acls' per-binding result.
    open_admin = AdminClient({"bootstrap.servers": plain})
    try:
        for future in open_admin.create_acls(bindings[:1], request_timeout=15).values():
            future.result()
        fail("create_acls without --auth succeeded")
    except KafkaException as error:
        seen["disabled"] = error.args[0].name()
    return seen


def kafka_python(plain):
    from kafka import KafkaAdminClient, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic

    seen = {}
    admin = KafkaAdminClient(bootstrap_servers=plain, request_timeout_ms=15000)
    admin.create_topics([NewTopic(TOPIC, num_partitions=2, replication_factor=1)])
    producer = KafkaProducer(bootstrap_servers=plain, enable_idempotence=True, acks="all")
    for index in range(3):
        producer.send(TOPIC, value=f"record {index}".encode(), partition=0).get(timeout=15)
    producer.close()

    deadline = time.time() + 15
    while True:
        answers = admin.describe_log_dirs()
        dirs = [d for answer in answers for d in answer["log_dirs"]]
        if len(dirs) != 1:
            fail(f"describe_log_dirs answered {answers}")
        topics = {t["name"]: t for t in dirs[0]["topics"]}
        if TOPIC in topics or time.time() > deadline:
            break
        time.sleep(0.2)
    if TOPIC not in topics:
        fail(f"describe_log_dirs does not list {TOPIC}: {dirs}")
    partitions = {p["partition_index"]: p for p in topics[TOPIC]["partitions"]}
    if partitions[0]["partition_size"] <= 0 or partitions[1]["partition_size"] != 0:
        fail(f"partition sizes {partitions}")
    seen["log_dir"] = dirs[0]["log_dir"]
    seen["partitions"] = len(partitions)

    from kafka.admin import (ACLFilter, ACLOperation, ACLPermissionType,
                             ACLResourcePatternType, ResourcePatternFilter, ResourceType)
    from kafka.errors import SecurityDisabledError
    every = ACLFilter(principal=None, host="*", operation=ACLOperation.ANY,
                      permission_type=ACLPermissionType.ANY,
                      resource_pattern=ResourcePatternFilter(ResourceType.ANY, None,
                                                             ACLResourcePatternType.ANY))
    try:
        admin.describe_acls(every)
        fail("kafka-python describe_acls without --auth succeeded")
    except SecurityDisabledError:
        seen["disabled"] = "SECURITY_DISABLED"

    states = admin.describe_producers([TopicPartition(TOPIC, 0)])
    producers = states[TopicPartition(TOPIC, 0)].active_producers
    if len(producers) != 1 or producers[0].last_sequence != 2:
        fail(f"describe_producers listed {producers}")
    seen["producers"] = len(producers)
    admin.close()
    return seen


def main():
    if len(sys.argv) != 5:
        fail(__doc__)
    plain, auth, user, password = sys.argv[1:]
    print(json.dumps({
        "confluent": confluent(plain, auth, user, password),
        "kafka_python": kafka_python(plain),
    }))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Ordinary confluent-kafka (librdkafka) admin code against fencelog's Kafka listener: describe
a topic's configs and the broker's, change `retention.ms` with IncrementalAlterConfigs, and
describe the topic again.

Usage: admin_configs.py BOOTSTRAP TOPIC BROKER_ID RETENTION_MS

Prints one line per step as it succeeds:
  topic retention.ms=V cleanup.policy=V segment.bytes=V retention.bytes=V
  broker N configs
  altered
  topic retention.ms=V
Exits non-zero (with the reason on stderr) at the first step that fails.
"""

import sys

from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

TIMEOUT = 30
KEYS = ["retention.ms", "cleanup.policy", "segment.bytes", "retention.bytes"]


def describe(admin, resource):
    (future,) = admin.describe_configs([resource]).values()
    return future.result(TIMEOUT)


def main():
    bootstrap, topic, broker_id, retention_ms = sys.argv[1:5]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic_resource = ConfigResource(ResourceType.TOPIC, topic)

    configs = describe(admin, topic_resource)
    missing = [key for key in KEYS if key not in configs]
    if missing:
        sys.exit(f"DescribeConfigs of {topic} lacks {missing}: {sorted(configs)}")
    print("topic " + " ".join(f"{key}={configs[key].value}" for key in KEYS), flush=True)

    broker = describe(admin, ConfigResource(ResourceType.BROKER, broker_id))
    if not broker:
        sys.exit("DescribeConfigs of the broker is empty")
    print(f"broker {len(broker)} configs", flush=True)

    change = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("retention.ms", retention_ms, incremental_operation=AlterConfigOpType.SET)
        ],
    )
    for future in admin.incremental_alter_configs([change]).values():
        future.result(TIMEOUT)
    print("altered", flush=True)

    configs = describe(admin, topic_resource)
    print(f"topic retention.ms={configs['retention.ms'].value}", flush=True)


if __name__ == "__main__":
    main()

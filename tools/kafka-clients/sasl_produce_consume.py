#!/usr/bin/env python3
"""Kafka clients with SASL/SCRAM-SHA-256 against fencelog's Kafka listener (`serve --auth`).

Usage: sasl_produce_consume.py BOOTSTRAP TOPIC CLIENT USER PASSWORD COUNT

CLIENT is `confluent` (librdkafka) or `kafka-python`. Both use
`security.protocol=SASL_PLAINTEXT`, `sasl.mechanism=SCRAM-SHA-256`. Produces COUNT records to
partition 0 of TOPIC, reads them back (assign, no group) and prints `ok COUNT`. Exits 2 when
authentication fails, 1 on any other error.
"""

import sys

AUTH_FAILED = 2


def confluent(bootstrap, topic, user, password, count):
    from confluent_kafka import Consumer, Producer, TopicPartition, OFFSET_BEGINNING, KafkaError

    common = {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": user,
        "sasl.password": password,
    }
    failures = []

    def on_error(error):
        failures.append(error)

    producer = Producer({**common, "linger.ms": 5, "error_cb": on_error,
                         "message.timeout.ms": 10000})
    errors = []

    def delivered(error, _message):
        if error is not None:
            errors.append(error)

    for i in range(count):
        producer.produce(topic, value=f"v{i}", partition=0, on_delivery=delivered)
        producer.poll(0)
    producer.flush(15)
    if any(f.code() == KafkaError._AUTHENTICATION for f in failures):
        print(f"authentication failed: {failures[0]}")
        sys.exit(AUTH_FAILED)
    if errors or failures:
        sys.exit(f"delivery failed: {errors[:3]} {failures[:3]}")
    consumer = Consumer({**common, "group.id": "unused-assign-only",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    seen = 0
    while seen < count:
        message = consumer.poll(10)
        if message is None:
            sys.exit(f"timed out after {seen} records")
        if message.error():
            continue
        seen += 1
    consumer.close()
    return seen


def kafka_python(bootstrap, topic, user, password, count):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.errors import KafkaError

    common = dict(bootstrap_servers=bootstrap, security_protocol="SASL_PLAINTEXT",
                  sasl_mechanism="SCRAM-SHA-256", sasl_plain_username=user,
                  sasl_plain_password=password)
    try:
        producer = KafkaProducer(linger_ms=5, **common)
    except KafkaError as error:  # NoBrokersAvailable, SaslAuthenticationFailed, ...
        print(f"authentication failed: {error!r}")
        sys.exit(AUTH_FAILED)
    futures = [producer.send(topic, value=f"v{i}".encode(), partition=0) for i in range(count)]
    producer.flush(30)
    for future in futures:
        future.get(10)
    producer.close()
    consumer = KafkaConsumer(enable_auto_commit=False, consumer_timeout_ms=10000, **common)
    partition = TopicPartition(topic, 0)
    consumer.assign([partition])
    consumer.seek_to_beginning(partition)
    seen = 0
    for _message in consumer:
        seen += 1
        if seen == count:
            break
    consumer.close()
    if seen < count:
        sys.exit(f"timed out after {seen} records")
    return seen


def main():
    bootstrap, topic, client, user, password, count = sys.argv[1:7]
    run = {"confluent": confluent, "kafka-python": kafka_python}[client]
    seen = run(bootstrap, topic, user, password, int(count))
    print(f"ok {seen}")


if __name__ == "__main__":
    main()

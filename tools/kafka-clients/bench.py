#!/usr/bin/env python3
"""Produce and consume throughput through a Kafka listener with librdkafka (confluent-kafka).

The documented equivalent of `fencelog bench --protocol kafka` (see docs/benchmarks.md): the same
workload as `fencelog bench --mode produce|consume` (records of --record-size bytes, batches of
--batch records, one producer, one partition, a topic with flush `never`) driven through the
Kafka listener by librdkafka instead of fencelog's own client.

Usage:
  fencelog serve --kafka-listen 127.0.0.1:9092 &
  fencelog topic create kbench --partitions 1 --flush never
  tools/kafka-clients/bench.py --bootstrap 127.0.0.1:9092 --topic kbench --seconds 5

Prints one JSON object: produce and consume MB/s and records/s, and produce ack latency p50/p99 in
ms (time from produce() to its delivery callback).
"""

import argparse
import json
import sys
import time


def percentile(sorted_values, fraction):
    if not sorted_values:
        return None
    return sorted_values[min(len(sorted_values) - 1, int(fraction * len(sorted_values)))]


def produce(args):
    from confluent_kafka import Producer

    producer = Producer({
        "bootstrap.servers": args.bootstrap,
        "acks": "1",
        "linger.ms": 5,
        "batch.num.messages": args.batch,
        "batch.size": args.batch * (args.record_size + 64),
        "queue.buffering.max.messages": 10 * args.batch,
        "queue.buffering.max.kbytes": 1024 * 1024,
        "enable.idempotence": args.idempotence,
    })
    value = b"x" * args.record_size
    latencies = []
    errors = []
    acked = [0]

    def delivered(error, _message, sent=None):
        if error is not None:
            errors.append(str(error))
        else:
            acked[0] += 1
            latencies.append(time.perf_counter() - sent)

    started = time.perf_counter()
    deadline = started + args.seconds
    sent = 0
    while time.perf_counter() < deadline:
        now = time.perf_counter()
        try:
            producer.produce(args.topic, value=value, partition=0,
                             on_delivery=lambda e, m, s=now: delivered(e, m, s))
            sent += 1
        except BufferError:
            producer.poll(0.001)
        if sent % 1000 == 0:
            producer.poll(0)
    producer.flush(60)
    elapsed = time.perf_counter() - started
    if errors:
        sys.exit(f"delivery errors: {errors[:3]}")
    latencies.sort()
    return {
        "records": acked[0],
        "records_per_s": acked[0] / elapsed,
        "mb_per_s": acked[0] * args.record_size / elapsed / 1e6,
        "ack_p50_ms": percentile(latencies, 0.5) * 1e3,
        "ack_p99_ms": percentile(latencies, 0.99) * 1e3,
    }


def consume(args, records):
    from confluent_kafka import Consumer, TopicPartition, OFFSET_BEGINNING

    consumer = Consumer({
        "bootstrap.servers": args.bootstrap,
        "group.id": "kbench-assign-only",
        "enable.auto.commit": False,
        "fetch.max.bytes": 8 * 1024 * 1024,
        "max.partition.fetch.bytes": 8 * 1024 * 1024,
    })
    consumer.assign([TopicPartition(args.topic, 0, OFFSET_BEGINNING)])
    started = time.perf_counter()
    seen = 0
    payload = 0
    while seen < records:
        messages = consumer.consume(num_messages=10_000, timeout=5)
        if not messages:
            break
        for message in messages:
            if message.error() is None:
                seen += 1
                payload += len(message.value())
    elapsed = time.perf_counter() - started
    consumer.close()
    return {
        "records": seen,
        "records_per_s": seen / elapsed,
        "mb_per_s": payload / elapsed / 1e6,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--record-size", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--idempotence", action="store_true")
    args = parser.parse_args()
    produced = produce(args)
    consumed = consume(args, produced["records"])
    print(json.dumps({"produce": produced, "consume": consumed}))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Exactly-once consume-transform-produce through fencelog's Kafka listener (confluent-kafka).

Reads INPUT as consumer group GROUP, writes each record upper-cased to OUTPUT, and commits the
output and the group's input positions in one Kafka transaction: a read_committed reader of
OUTPUT sees every input record transformed exactly once, whatever crashes in between.

    fencelog serve --kafka-listen 127.0.0.1:9092 &
    fencelog topic create input --partitions 2 && fencelog topic create output --partitions 2
    python3 examples/kafka_exactly_once.py --bootstrap 127.0.0.1:9092 \\
        --input input --output output --group upper --idle-seconds 5

Why it is exactly once (see docs/kafka.md, "Transactions"):
- the output records and the input positions (send_offsets_to_transaction) commit or abort
  together: fencelog's coordinator applies the positions only with the commit markers;
- a second copy of this program with the same --transactional-id fences the first: its writes
  are refused at the partitions (the abort markers carry the newer producer epoch, which each
  partition's writer checks), and its commit fails with a fatal "fenced" error;
- read_committed readers of OUTPUT (this program's downstream) never see an aborted or open
  transaction's records.

On an abortable error the transaction is aborted and the consumer rewinds to the group's
committed positions, so the aborted input is processed again; a fatal error (fenced) ends the
program, since a newer instance has taken over.
"""

import argparse
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer


def rewind(consumer):
    """Moves the consumer back to the group's committed positions (after an abort)."""
    assignment = consumer.assignment()
    for position in consumer.committed(assignment, 10):
        if position.offset >= 0:
            consumer.seek(position)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--transactional-id", default=None, help="default: GROUP-INPUT")
    parser.add_argument("--batch", type=int, default=100, help="records per transaction")
    parser.add_argument(
        "--idle-seconds", type=float, default=0, help="stop after this long without input (0: never)"
    )
    args = parser.parse_args()

    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    producer = Producer(
        {
            "bootstrap.servers": args.bootstrap,
            "transactional.id": args.transactional_id or f"{args.group}-{args.input}",
        }
    )
    producer.init_transactions(30)
    consumer.subscribe([args.input])
    copied = 0
    last_input = time.monotonic()
    try:
        while not args.idle_seconds or time.monotonic() - last_input < args.idle_seconds:
            messages = [m for m in consumer.consume(args.batch, 0.5) if not m.error()]
            if not consumer.assignment():
                last_input = time.monotonic()  # still joining the group: not idle yet
            if not messages:
                continue
            last_input = time.monotonic()
            producer.begin_transaction()
            try:
                for message in messages:
                    producer.produce(
                        args.output,
                        key=message.key(),
                        value=message.value().upper(),
                        partition=message.partition(),
                    )
                producer.send_offsets_to_transaction(
                    consumer.position(consumer.assignment()),
                    consumer.consumer_group_metadata(),
                    30,
                )
                producer.commit_transaction(30)
                copied += len(messages)
            except KafkaException as error:
                if error.args[0].txn_requires_abort():
                    producer.abort_transaction(30)
                    rewind(consumer)
                    continue
                raise
    finally:
        consumer.close()
    print(f"copied {copied} records exactly once", file=sys.stderr)
    print(copied)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""kafka-python's KafkaConsumer in a consumer group against fencelog's Kafka listener.

Run by tests/kafka/kafka_groups.rs; prints one JSON object on stdout, diagnostics on stderr.

    kafka_python_group.py split  BOOTSTRAP TOPIC GROUP
        Two members (a, b) subscribe to TOPIC (2 partitions, 10 records each) in GROUP, read
        everything and commit after each poll, until each member holds one partition and the
        group has committed offset 10 on both; then both close (LeaveGroup). Prints the final
        assignments and what each member read.

    kafka_python_group.py resume BOOTSTRAP TOPIC GROUP
        A restarted member of GROUP (a new consumer: it knows nothing but the group) reads until
        it has 5 records from each partition, commits and closes. Prints the offsets it read per
        partition: they must start at the committed offset, not at the beginning.
"""

import json
import sys
import threading
import time

from kafka import KafkaConsumer, TopicPartition

DEADLINE_S = 60


def consumer(bootstrap, topic, group, client_id):
    c = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        client_id=client_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=10000,
        heartbeat_interval_ms=500,
        max_poll_interval_ms=30000,
        request_timeout_ms=40000,
    )
    c.subscribe([topic])
    return c


def split(bootstrap, topic, group):
    state = {
        name: {"assignment": [], "read": [], "committed": {}}
        for name in ("a", "b")
    }
    stop = threading.Event()
    errors = []

    def member(name):
        try:
            c = consumer(bootstrap, topic, group, "py-" + name)
            while not stop.is_set():
                batches = c.poll(timeout_ms=200)
                for tp, records in batches.items():
                    for record in records:
                        state[name]["read"].append([tp.partition, record.offset])
                if batches:
                    c.commit()
                assignment = sorted(tp.partition for tp in c.assignment())
                state[name]["assignment"] = assignment
                state[name]["committed"] = {
                    p: c.committed(TopicPartition(topic, p)) for p in assignment
                }
            c.close()
        except Exception as error:  # reported to the test, which fails
            errors.append(f"{name}: {error!r}")
            stop.set()

    threads = [threading.Thread(target=member, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline and not stop.is_set():
        a, b = state["a"], state["b"]
        split_done = (
            len(a["assignment"]) == 1
            and len(b["assignment"]) == 1
            and a["assignment"] != b["assignment"]
        )
        committed = {**a["committed"], **b["committed"]}
        if split_done and committed.get(0) == 10 and committed.get(1) == 10:
            break
        time.sleep(0.2)
    else:
        errors.append(f"no split with both partitions committed within {DEADLINE_S} s: {state}")
    stop.set()
    for thread in threads:
        thread.join()
    if errors:
        print("\n".join(errors), file=sys.stderr)
        sys.exit(1)
    print(json.dumps({
        "assignments": {name: state[name]["assignment"] for name in state},
        "read": {name: state[name]["read"] for name in state},
    }))


def resume(bootstrap, topic, group):
    c = consumer(bootstrap, topic, group, "py-restarted")
    consumed = {0: [], 1: []}
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline and not all(len(v) >= 5 for v in consumed.values()):
        for tp, records in c.poll(timeout_ms=200).items():
            consumed[tp.partition].extend(record.offset for record in records)
    c.commit()
    c.close()
    print(json.dumps({"consumed": consumed}))


def main():
    mode, bootstrap, topic, group = sys.argv[1:5]
    {"split": split, "resume": resume}[mode](bootstrap, topic, group)


if __name__ == "__main__":
    main()

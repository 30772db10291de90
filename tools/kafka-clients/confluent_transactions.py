#!/usr/bin/env python3
"""confluent-kafka (librdkafka) transactional producers and read_committed consumers against
fencelog's Kafka listener (issue 31's "Judged by", one scenario each).

Run by tests/kafka/kafka_transaction_clients.rs; prints one JSON object on stdout,
diagnostics on stderr, and exits non-zero (with the reason on stderr) when a check fails.

    confluent_transactions.py commit-abort BOOTSTRAP TOPIC
        TOPIC has 2 partitions. A transaction of 100 records over both partitions is committed,
        then one of 50 is aborted. A read_committed consumer reads the 100 and none of the 50; a
        read_uncommitted consumer reads all 150 data records.

    confluent_transactions.py open-transaction BOOTSTRAP TOPIC
        Producer A leaves a transaction open on partition 0; producer B (another transactional
        id) commits a record after it on the same partition. A read_committed consumer reads
        neither; after A aborts it reads B's record and not A's.

    confluent_transactions.py fence BOOTSTRAP TOPIC
        Instance 1 of a transactional id writes 10 records in an open transaction; instance 2 of
        the same id initialises (fencing it) and commits its own record. Instance 1's next send
        and commit fail fatally (fenced); none of its records becomes visible to read_committed.

    confluent_transactions.py send-offsets BOOTSTRAP INPUT OUTPUT GROUP
        INPUT (1 partition) gets 20 records from a plain producer. A consume-transform-produce
        loop reads them with a consumer of GROUP, writes each upper-cased to OUTPUT in a
        transaction and sends the consumer's position with send_offsets_to_transaction: before the
        commit the group has no committed offset (asked as read_uncommitted: a read_committed
        consumer's require_stable is answered UNSTABLE_OFFSET_COMMIT until then), after it the
        offset is 20 and OUTPUT holds the 20 records for read_committed.

    confluent_transactions.py native-leased BOOTSTRAP TOPIC
        Partition 0 of TOPIC is leased by a native client (the test takes the lease first). A
        transaction's record for it is never delivered (the broker answers AddPartitionsToTxn
        with CONCURRENT_TRANSACTIONS while the lease lives, and the record times out), the
        commit fails as abortable and is aborted, and nothing lands on the partition.

    confluent_transactions.py commit-loop BOOTSTRAP TOPIC
        Commits transactions until the broker stops answering (the test kills it): transaction i
        writes records `i-0`..`i-4` over both partitions of TOPIC; a line `committed i` is
        printed (and flushed) once commit_transaction(i) returned. Ends with `stopped: ERROR`.

    confluent_transactions.py read-all BOOTSTRAP TOPIC SECONDS
        Reads both partitions of TOPIC as read_committed until SECONDS pass with nothing new,
        and prints {"records": [...]}.
"""

import json
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

POLL_SECONDS = 4.0


def fail(message):
    print(message, file=sys.stderr)
    sys.exit(1)


def producer(bootstrap, transactional_id, **extra):
    config = {"bootstrap.servers": bootstrap, "transactional.id": transactional_id}
    config.update(extra)
    made = Producer(config)
    made.init_transactions(20)
    return made


def read(bootstrap, topic, partitions, isolation, seconds=POLL_SECONDS):
    """Every record of `partitions` of `topic` from offset 0 that `isolation` shows, as text."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{topic}-{isolation}-{time.monotonic_ns()}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(topic, partition, 0) for partition in partitions])
    values = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is None:
            continue
        if message.error():
            fail(f"consumer error: {message.error()}")
        values.append(message.value().decode())
    consumer.close()
    return values


def commit_abort(bootstrap, topic):
    tx = producer(bootstrap, "judged-commit-abort")
    tx.begin_transaction()
    for index in range(100):
        tx.produce(topic, value=f"committed-{index}", partition=index % 2)
    tx.commit_transaction(20)
    tx.begin_transaction()
    for index in range(50):
        tx.produce(topic, value=f"aborted-{index}", partition=index % 2)
    tx.flush(20)
    tx.abort_transaction(20)
    committed = read(bootstrap, topic, [0, 1], "read_committed")
    uncommitted = read(bootstrap, topic, [0, 1], "read_uncommitted")
    if sorted(committed) != sorted(f"committed-{index}" for index in range(100)):
        fail(f"read_committed read {len(committed)} records: {committed[:5]}...")
    if len(uncommitted) != 150:
        fail(f"read_uncommitted read {len(uncommitted)} records, not 150")
    return {"read_committed": len(committed), "read_uncommitted": len(uncommitted)}


def open_transaction(bootstrap, topic):
    first = producer(bootstrap, "judged-open-a")
    first.begin_transaction()
    first.produce(topic, value="open-a", partition=0)
    first.flush(20)
    second = producer(bootstrap, "judged-open-b")
    second.begin_transaction()
    second.produce(topic, value="later-b", partition=0)
    second.commit_transaction(20)
    while_open = read(bootstrap, topic, [0], "read_committed")
    first.abort_transaction(20)
    after_abort = read(bootstrap, topic, [0], "read_committed")
    if while_open:
        fail(f"read_committed read past the open transaction: {while_open}")
    if after_abort != ["later-b"]:
        fail(f"after the abort read_committed read {after_abort}, not ['later-b']")
    return {"while_open": while_open, "after_abort": after_abort}


def fence(bootstrap, topic):
    zombie = producer(bootstrap, "judged-fence")
    zombie.begin_transaction()
    for index in range(10):
        zombie.produce(topic, value=f"zombie-{index}", partition=index % 2)
    zombie.flush(20)
    successor = producer(bootstrap, "judged-fence")
    successor.begin_transaction()
    successor.produce(topic, value="successor", partition=0)
    successor.commit_transaction(20)
    zombie_error = None
    try:
        zombie.produce(topic, value="zombie-late", partition=0)
        zombie.commit_transaction(20)
    except KafkaException as error:
        zombie_error = error.args[0]
    if zombie_error is None:
        fail("the fenced instance committed")
    if not zombie_error.fatal():
        fail(f"the fenced instance's error is not fatal: {zombie_error}")
    visible = read(bootstrap, topic, [0, 1], "read_committed")
    leaked = [value for value in visible if value.startswith("zombie")]
    if leaked or visible.count("successor") != 1:
        fail(f"read_committed read {visible}")
    return {
        "zombie_error": zombie_error.name(),
        "zombie_fatal": zombie_error.fatal(),
        "zombie_visible": leaked,
        "successor_visible": visible.count("successor"),
    }


def send_offsets(bootstrap, input_topic, output_topic, group):
    plain = Producer({"bootstrap.servers": bootstrap})
    for index in range(20):
        plain.produce(input_topic, value=f"record-{index}", partition=0)
    plain.flush(20)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    partition = TopicPartition(input_topic, 0)
    consumer.assign([TopicPartition(input_topic, 0, 0)])
    loop = producer(bootstrap, "judged-ctp")
    loop.begin_transaction()
    read_count = 0
    deadline = time.monotonic() + 20
    while read_count < 20 and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is None:
            continue
        if message.error():
            fail(f"consumer error: {message.error()}")
        loop.produce(output_topic, value=message.value().decode().upper(), partition=0)
        read_count += 1
    if read_count != 20:
        fail(f"the loop read {read_count} input records, not 20")
    loop.send_offsets_to_transaction(
        consumer.position([partition]), consumer.consumer_group_metadata(), 20
    )
    # A read_committed consumer asks with require_stable, which the broker answers
    # UNSTABLE_OFFSET_COMMIT (retried) while the transaction holds the position: ask as a
    # read_uncommitted one, which gets the committed offset as it stands.
    peek = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            # librdkafka's default is read_committed.
            "isolation.level": "read_uncommitted",
        }
    )
    before = peek.committed([partition], 10)[0].offset
    peek.close()
    loop.commit_transaction(20)
    after = consumer.committed([partition], 10)[0].offset
    consumer.close()
    output = read(bootstrap, output_topic, [0], "read_committed")
    if before >= 0:
        fail(f"the group's offset was committed before the transaction: {before}")
    if after != 20:
        fail(f"the group's committed offset is {after} after the commit, not 20")
    if sorted(output) != sorted(f"RECORD-{index}" for index in range(20)):
        fail(f"the output holds {output}")
    return {"committed_before": before, "committed_after": after, "output": len(output)}


def native_leased(bootstrap, topic):
    tx = producer(
        bootstrap,
        "judged-native",
        **{"message.timeout.ms": 3000, "transaction.timeout.ms": 10000},
    )
    delivered = []
    tx.begin_transaction()
    tx.produce(
        topic,
        value="must-not-land",
        partition=0,
        on_delivery=lambda error, message: delivered.append(error),
    )
    tx.flush(10)
    outcome = "committed"
    try:
        tx.commit_transaction(10)
    except KafkaException as error:
        if not error.args[0].txn_requires_abort():
            fail(f"the commit failed, but not as abortable: {error}")
        tx.abort_transaction(20)
        outcome = "aborted"
    if outcome == "committed":
        fail("a transaction committed a record to a natively leased partition")
    if not delivered or delivered[0] is None:
        fail(f"the record was delivered: {delivered}")
    landed = read(bootstrap, topic, [0], "read_uncommitted", seconds=2.0)
    if landed:
        fail(f"records landed on the leased partition: {landed}")
    return {"delivery_error": delivered[0].name(), "outcome": outcome, "landed": landed}


def commit_loop(bootstrap, topic, resume_seconds="0", seconds="0"):
    """Commits transactions of 5 records over two partitions until an error stops it (or,
    with seconds > 0, until that long has passed), printing "committed N" once commit_transaction(N)
    returned. With resume_seconds > 0 a retriable commit error (the coordinator moving, say)
    is resumed by calling commit_transaction again, as librdkafka asks ("retry call to
    resume"), for up to that long, an abortable one aborts the transaction and goes on, and
    the timeouts are long enough for a cluster's failover: the loop rides through it."""
    resume = float(resume_seconds)
    timeout_ms = 15000 if resume else 3000
    tx = producer(
        bootstrap,
        "judged-kill9",
        **{
            "transaction.timeout.ms": timeout_ms,
            "message.timeout.ms": timeout_ms,
            "socket.timeout.ms": 2000,
        },
    )
    number = 0
    stop_at = time.monotonic() + float(seconds) if float(seconds) else None
    try:
        while stop_at is None or time.monotonic() < stop_at:
            tx.begin_transaction()
            for index in range(5):
                tx.produce(topic, value=f"{number}-{index}", partition=index % 2)
            give_up = time.monotonic() + resume
            while True:
                try:
                    tx.commit_transaction(5)
                    print(f"committed {number}", flush=True)
                    break
                except KafkaException as error:
                    kafka_error = error.args[0]
                    if resume and kafka_error.retriable() and time.monotonic() < give_up:
                        print(f"resuming {number}: {kafka_error}", flush=True)
                        continue
                    if resume and kafka_error.txn_requires_abort():
                        print(f"aborting {number}: {kafka_error}", flush=True)
                        tx.abort_transaction(30)
                        break
                    raise
            number += 1
    except KafkaException as error:
        print(f"stopped: {error}", flush=True)
    sys.exit(0)


def read_all(bootstrap, topic, seconds):
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-all-{time.monotonic_ns()}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)])
    values = []
    quiet_until = time.monotonic() + float(seconds)
    while time.monotonic() < quiet_until:
        message = consumer.poll(0.2)
        if message is None:
            continue
        if message.error():
            print(f"consumer error (retried): {message.error()}", file=sys.stderr)
            continue
        values.append(message.value().decode())
        quiet_until = time.monotonic() + float(seconds)
    consumer.close()
    return {"records": values}


def main():
    scenario, arguments = sys.argv[1], sys.argv[2:]
    scenarios = {
        "commit-abort": commit_abort,
        "open-transaction": open_transaction,
        "fence": fence,
        "send-offsets": send_offsets,
        "native-leased": native_leased,
        "commit-loop": commit_loop,
        "read-all": read_all,
    }
    if scenario not in scenarios:
        fail(f"unknown scenario {scenario}: one of {', '.join(scenarios)}")
    print(json.dumps(scenarios[scenario](*arguments)))


if __name__ == "__main__":
    main()

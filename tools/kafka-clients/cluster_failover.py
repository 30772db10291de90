#!/usr/bin/env python3
"""Idempotent Kafka producers against a three-broker fencelog cluster's Kafka listeners, through
the faults a cluster exists for. Run by tests/cli/kafka_cluster.rs.

Usage: cluster_failover.py CLIENT BROKERS FAULT:TOPIC:RECORDS...

CLIENT is `confluent` (confluent-kafka, i.e. librdkafka) or `kafka-python`; each run uses that
library alone, for the admin calls and the consumer as well as the producer. BROKERS is
`node=pid@kafka-address,...`, every broker of the cluster (all of them the bootstrap list). Each FAULT:TOPIC:RECORDS is one scenario, run in the
order given on the same cluster:

1. TOPIC is created with CreateTopics (3 partitions, replication factor 3,
   min.insync.replicas=2), and Metadata is awaited until it shows brokers 1, 2, 3 and three
   in-sync replicas on every partition;
2. an idempotent acks=all producer sends RECORDS values `v0`, `v1`, ... to partition 0, and a
   third of the way in (all earlier records delivered) the leader of partition 0 (from
   Metadata) suffers FAULT:
   - `kill9`: SIGKILL. The producer goes on sending the rest.
   - `sigstop`: before the idempotent producer starts, a second, non-idempotent producer with
     retries=0, which knows the leader alone, writes `warm` to partition 0 (so it holds a
     connection to the leader: `warm` is the log's first record). At the fault: SIGSTOP,
     awaited until every thread of the process is stopped; the retries=0 producer then sends
     `stale` to partition 0, a request that sits in the frozen broker's socket. The idempotent producer sends the second third, which is delivered only
     once a new leader (elected when the paused broker's registration lapses) accepts it;
     Metadata from the survivors names that new leader. Then SIGCONT: the old leader wakes up
     deposed and rejoins as a follower: Metadata shows three in-sync replicas of partition 0
     again. The last third is sent after that;
3. every value is delivered with no error reported to the application (a delivery error is
   printed with whether the library calls it retriable; any error fails the run), then
   partition 0 is read back from its current leader up to its high watermark: exactly the
   values sent (after `warm` in the sigstop scenario), each once, in the order sent. `stale`
   is there once if its producer was told it was delivered (librdkafka may hand a request it
   had not sent yet to the new leader), else at most once; the test then checks each replica's
   files hold the same log.

Prints one line per check and `ok` at the end; exits non-zero with the reason otherwise.
"""

import os
import signal
import sys
import time

PAUSE_MS = 5000  # request timeout of the main producers: how soon a frozen leader is given up


def log(message):
    print(message, flush=True)


def fail(message):
    log(f"FAIL: {message}")
    sys.exit(1)


def wait_for(what, check, timeout=60.0):
    """Calls `check` until it returns something true; a client error counts as "not yet"."""
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            result = check()
            if result:
                return result
        except Exception as error:  # noqa: BLE001 - a broker between elections, or frozen
            last = error
        time.sleep(0.2)
    fail(f"timed out waiting for {what} (last error: {last!r})")


def pause(pid):
    """SIGSTOP, then waits until every thread is stopped (the signal is asynchronous)."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.time() + 30
    while time.time() < deadline:
        states = []
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/stat") as stat:
                    states.append(stat.read().rsplit(") ", 1)[1][0])
            except (OSError, IndexError):
                continue
        if states and all(state in "tT" for state in states):
            return
        time.sleep(0.005)
    fail(f"process {pid} never stopped")


class Confluent:
    """confluent-kafka (librdkafka)."""

    def __init__(self, bootstrap):
        from confluent_kafka.admin import AdminClient

        self.bootstrap = bootstrap
        self.admin = AdminClient({"bootstrap.servers": bootstrap,
                                  "socket.timeout.ms": PAUSE_MS})

    def create_topic(self, topic):
        from confluent_kafka.admin import NewTopic

        futures = self.admin.create_topics(
            [NewTopic(topic, num_partitions=3, replication_factor=3,
                      config={"min.insync.replicas": "2"})],
            request_timeout=30,
        )
        futures[topic].result(timeout=60)

    def metadata(self, topic, bootstrap=None):
        """(sorted broker ids, {partition: (leader, sorted isr)}), from any of `bootstrap`."""
        from confluent_kafka.admin import AdminClient

        admin = self.admin
        if bootstrap is not None:  # a fresh client that asks these brokers only first
            admin = AdminClient({"bootstrap.servers": bootstrap})
        metadata = admin.list_topics(topic, timeout=PAUSE_MS / 1000)
        partitions = {}
        for index, partition in metadata.topics[topic].partitions.items():
            if partition.error is None:
                partitions[index] = (partition.leader, sorted(partition.isrs))
        return sorted(metadata.brokers), partitions

    def producer(self):
        from confluent_kafka import Producer

        producer = Producer({
            "bootstrap.servers": self.bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 120000,
            "request.timeout.ms": PAUSE_MS,
            "socket.timeout.ms": PAUSE_MS,
            "retry.backoff.ms": 100,
        })
        return ConfluentProducer(producer)

    def stale_producer(self, leader_address, topic):
        """Knows `leader_address` alone, holds a connection to it, never retries."""
        from confluent_kafka import Producer

        producer = Producer({
            "bootstrap.servers": leader_address,
            "enable.idempotence": False,
            "acks": "all",
            "retries": 0,
            "linger.ms": 0,
            "message.timeout.ms": 60000,
            "request.timeout.ms": 60000,
            "socket.timeout.ms": 60000,
            "topic.metadata.refresh.interval.ms": 600000,
        })
        producer.list_topics(topic, timeout=10)
        return ConfluentProducer(producer)

    def read_partition(self, topic):
        """Partition 0 from offset 0 to its high watermark, as the leader serves it."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({
            "bootstrap.servers": self.bootstrap,
            "group.id": f"check-{topic}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        })
        try:
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
            consumer.assign([TopicPartition(topic, 0, 0)])
            values = []
            next_offset = 0
            deadline = time.time() + 60
            while next_offset < high and time.time() < deadline:
                message = consumer.poll(1.0)
                if message is None or message.error():
                    continue
                values.append(message.value().decode())
                next_offset = message.offset() + 1
            return values, high
        finally:
            consumer.close()


class ConfluentProducer:
    def __init__(self, producer):
        self.producer = producer
        self.delivered = []
        self.errors = []

    def send(self, topic, value):
        def on_delivery(error, message):
            if error is not None:
                self.errors.append((message.value().decode(), describe_confluent(error)))
            else:
                self.delivered.append(message.value().decode())

        while True:
            try:
                self.producer.produce(topic, value=value.encode(), partition=0,
                                      on_delivery=on_delivery)
                break
            except BufferError:
                self.producer.poll(0.1)
        self.producer.poll(0)

    def flush(self, timeout):
        self.producer.flush(timeout)  # the caller counts what was delivered

    def close(self):
        self.producer.flush(0)


def describe_confluent(error):
    return (f"{error.name()} ({error.str()}), retriable={error.retriable()}, "
            f"fatal={error.fatal()}")


class KafkaPython:
    """kafka-python (pure Python)."""

    def __init__(self, bootstrap):
        from kafka.admin import KafkaAdminClient

        self.bootstrap = bootstrap.split(",")
        self.admin = KafkaAdminClient(bootstrap_servers=self.bootstrap,
                                      request_timeout_ms=PAUSE_MS)

    def create_topic(self, topic):
        from kafka.admin import NewTopic

        self.admin.create_topics(
            [NewTopic(topic, 3, 3, topic_configs={"min.insync.replicas": "2"})],
            timeout_ms=30000,
        )

    def metadata(self, topic, bootstrap=None):
        from kafka.admin import KafkaAdminClient

        admin = self.admin
        if bootstrap is not None:
            admin = KafkaAdminClient(bootstrap_servers=bootstrap.split(","),
                                     request_timeout_ms=PAUSE_MS)
        try:
            cluster = admin.describe_cluster()
            described = admin.describe_topics([topic])
        finally:
            if admin is not self.admin:
                admin.close()
        # kafka-python 2.x names a broker's id node_id; 3.x, from Metadata, broker_id.
        brokers = sorted(broker.get("node_id", broker.get("broker_id"))
                         for broker in cluster["brokers"])
        partitions = {}
        for partition in described[0]["partitions"]:
            if partition["error_code"] == 0:
                partitions[partition["partition_index"]] = (
                    partition["leader_id"], sorted(partition["isr_nodes"]))
        return brokers, partitions

    def producer(self):
        from kafka import KafkaProducer

        producer = KafkaProducer(
            bootstrap_servers=self.bootstrap,
            enable_idempotence=True,
            acks="all",
            linger_ms=5,
            delivery_timeout_ms=120000,
            request_timeout_ms=PAUSE_MS,
            retry_backoff_ms=100,
        )
        return KafkaPythonProducer(producer)

    def stale_producer(self, leader_address, topic):
        from kafka import KafkaProducer

        producer = KafkaProducer(
            bootstrap_servers=[leader_address],
            enable_idempotence=False,
            acks="all",
            retries=0,
            linger_ms=0,
            request_timeout_ms=60000,
            delivery_timeout_ms=60000,
            metadata_max_age_ms=600000,
        )
        producer.partitions_for(topic)
        return KafkaPythonProducer(producer)

    def read_partition(self, topic):
        from kafka import KafkaConsumer, TopicPartition

        partition = TopicPartition(topic, 0)
        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None,
                                 enable_auto_commit=False)
        try:
            consumer.assign([partition])
            high = consumer.end_offsets([partition])[partition]
            consumer.seek(partition, 0)
            values = []
            next_offset = 0
            deadline = time.time() + 60
            while next_offset < high and time.time() < deadline:
                for records in consumer.poll(timeout_ms=1000).values():
                    for record in records:
                        if record.offset < high:
                            values.append(record.value.decode())
                        next_offset = record.offset + 1
            return values, high
        finally:
            consumer.close()


class KafkaPythonProducer:
    def __init__(self, producer):
        self.producer = producer
        self.delivered = []
        self.errors = []

    def send(self, topic, value):
        future = self.producer.send(topic, value=value.encode(), partition=0)
        future.add_callback(lambda _metadata: self.delivered.append(value))
        future.add_errback(lambda error: self.errors.append((value, describe_kafka_python(error))))

    def flush(self, timeout):
        from kafka.errors import KafkaTimeoutError

        try:
            self.producer.flush(timeout)
        except KafkaTimeoutError:
            pass  # the caller counts what was delivered

    def close(self):
        self.producer.close(timeout=0)


def describe_kafka_python(error):
    return (f"{type(error).__name__} ({error}), retriable={getattr(error, 'retriable', '?')}, "
            f"invalid_metadata={getattr(error, 'invalid_metadata', '?')}")


def scenario(client, pid_of, fault, topic, records):
    log(f"--- {fault} on {topic}, {records} records")
    client.create_topic(topic)

    def full_isr():
        brokers, partitions = client.metadata(topic)
        if brokers != [1, 2, 3] or len(partitions) != 3:
            return None
        if any(isr != [1, 2, 3] or leader < 1 for leader, isr in partitions.values()):
            return None
        return partitions

    partitions = wait_for(f"three brokers and full ISRs of {topic}", full_isr)
    leader = partitions[0][0]
    log(f"created {topic}: brokers [1, 2, 3], isr 3 everywhere, leader of p0 {leader}")

    stale = None
    expected = [f"v{i}" for i in range(records)]
    if fault == "sigstop":
        # Its connection to the leader exists once it has written there: it writes `warm` first.
        stale = client.stale_producer(pid_of[leader][1], topic)
        stale.send(topic, "warm")
        stale.flush(60)
        if stale.delivered != ["warm"]:
            fail(f"the retries=0 producer could not write to the leader: {stale.errors}")
        stale.delivered.clear()
        expected.insert(0, "warm")

    producer = client.producer()
    sent = len(expected) - records  # `warm`
    first, second = sent + records // 3, sent + 2 * records // 3
    for value in expected[sent:first]:
        producer.send(topic, value)
    producer.flush(60)
    if len(producer.delivered) != first - sent:
        fail(f"{len(producer.delivered)} of the first {first - sent} delivered: {producer.errors[:5]}")

    survivors = ",".join(address for node, (_, address) in sorted(pid_of.items())
                         if node != leader)
    if fault == "kill9":
        os.kill(pid_of[leader][0], signal.SIGKILL)
        log(f"killed broker {leader} (SIGKILL)")
        for value in expected[first:]:
            producer.send(topic, value)
    elif fault == "sigstop":
        pause(pid_of[leader][0])
        started = time.time()
        log(f"paused broker {leader} (SIGSTOP)")
        stale.send(topic, "stale")
        for value in expected[first:second]:
            producer.send(topic, value)
        producer.flush(120)
        log(f"second third delivered {time.time() - started:.1f} s after the pause")
        if len(producer.delivered) != second - sent:
            fail(f"{len(producer.delivered)} of {second - sent} delivered while broker {leader} was "
                 f"paused: {producer.errors[:5]}")

        def new_leader():
            _, partitions = client.metadata(topic, bootstrap=survivors)
            now = partitions.get(0, (-1, []))[0]
            return now if now not in (-1, leader) else None

        moved = wait_for("a new leader of p0 named by the survivors", new_leader)
        log(f"new leader of p0 {moved}; resuming broker {leader} after "
            f"{time.time() - started:.1f} s (SIGCONT)")
        os.kill(pid_of[leader][0], signal.SIGCONT)

        def rejoined():
            brokers, partitions = client.metadata(topic)
            leader_now, isr = partitions.get(0, (-1, []))
            return (leader_now, isr) if brokers == [1, 2, 3] and isr == [1, 2, 3] else None

        leader_now, isr = wait_for(f"broker {leader} back in the ISR of p0", rejoined)
        log(f"broker {leader} rejoined: p0 leader {leader_now}, isr {isr}")
        for value in expected[second:]:
            producer.send(topic, value)
    else:
        fail(f"unknown fault {fault}")

    producer.flush(120)
    if producer.errors:
        fail(f"delivery errors: {producer.errors[:5]}")
    if sorted(producer.delivered, key=lambda v: int(v[1:])) != expected[sent:]:
        fail(f"{len(producer.delivered)} of {records} delivered")
    log(f"delivered {records} without an error")
    producer.close()

    stale_acknowledged = False
    if stale is not None:
        stale.flush(60)
        stale_acknowledged = bool(stale.delivered)
        # The library may hand a request it had not sent yet to the new leader (then `stale`
        # is an ordinary, acknowledged write); what the frozen broker was sent must not land.
        log(f"stale write: {'acknowledged' if stale_acknowledged else stale.errors}")
        stale.close()

    values, high = client.read_partition(topic)
    stale_count = values.count("stale")
    if stale_acknowledged and stale_count != 1:
        fail(f"`stale` was acknowledged and is in the log {stale_count} times")
    if stale_count > 1:
        fail(f"`stale` is in the log {stale_count} times")
    values = [value for value in values if value != "stale"]
    if values != expected:
        duplicates = len(values) - len(set(values))
        missing = sorted(set(expected) - set(values), key=lambda v: int(v[1:]))
        extra = sorted(set(values) - set(expected))
        fail(f"read {len(values)} values up to high watermark {high}: missing {missing[:10]}, "
             f"{duplicates} duplicates, extra {extra[:10]}, first {values[:5]}")
    log(f"read back {len(values)} up to high watermark {high}: each once, in order "
        f"(`stale` {stale_count} times)")


def main():
    if len(sys.argv) < 4:
        fail(__doc__)
    client_name, brokers = sys.argv[1], sys.argv[2]
    pid_of = {}  # node id: (pid, Kafka address)
    for entry in brokers.split(","):
        node, rest = entry.split("=")
        pid, address = rest.split("@")
        pid_of[int(node)] = (int(pid), address)
    bootstrap = ",".join(address for _, address in pid_of.values())
    client = {"confluent": Confluent, "kafka-python": KafkaPython}[client_name](bootstrap)
    for spec in sys.argv[3:]:
        fault, topic, records = spec.split(":")
        scenario(client, pid_of, fault, topic, int(records))
    log("ok")


if __name__ == "__main__":
    main()

#!/usr/bin/env node
// kafkajs transactions against fencelog's Kafka listener, run by
// tests/kafka/kafka_transaction_clients.rs:
//
//     node transactions.js BOOTSTRAP TOPIC
//
// TOPIC has 2 partitions. A transactional producer (`transactionalId`, `maxInFlightRequests: 1`,
// `idempotent: true`) commits a transaction of 10 records over both partitions, then aborts one
// of 5. A consumer with `readUncommitted: false` (read_committed) reads the 10 committed
// records and none of the aborted. Prints one JSON object; exits non-zero on any error.

const { Kafka, logLevel } = require('kafkajs');

const DEADLINE_MS = 30000;

async function readAll(kafka, topic, expected) {
  const consumer = kafka.consumer({ groupId: `kafkajs-txn-${Date.now()}`, readUncommitted: false });
  await consumer.connect();
  await consumer.subscribe({ topics: [topic], fromBeginning: true });
  const read = [];
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`read ${read.length} of ${expected} records in time`)), DEADLINE_MS);
    consumer.run({
      eachMessage: async ({ message }) => {
        read.push(message.value.toString());
        if (read.length === expected) {
          clearTimeout(timer);
          // Linger: an aborted record arriving late would show up here.
          setTimeout(resolve, 1500);
        }
      },
    });
  });
  await consumer.disconnect();
  return read;
}

async function main() {
  const [bootstrap, topic] = process.argv.slice(2);
  const kafka = new Kafka({ clientId: 'kafkajs-transactions', brokers: [bootstrap], logLevel: logLevel.ERROR });
  const producer = kafka.producer({ transactionalId: 'kafkajs-tx', maxInFlightRequests: 1, idempotent: true });
  await producer.connect();

  const committed = await producer.transaction();
  await committed.send({
    topic,
    messages: [...Array(10).keys()].map((i) => ({ value: `committed-${i}`, partition: i % 2 })),
  });
  await committed.commit();

  const aborted = await producer.transaction();
  await aborted.send({
    topic,
    messages: [...Array(5).keys()].map((i) => ({ value: `aborted-${i}`, partition: i % 2 })),
  });
  await aborted.abort();
  await producer.disconnect();

  const read = await readAll(kafka, topic, 10);
  const leaked = read.filter((value) => value.startsWith('aborted'));
  if (leaked.length || read.length !== 10) {
    throw new Error(`read_committed read ${JSON.stringify(read)}`);
  }
  console.log(JSON.stringify({ read_committed: read.length, aborted_visible: leaked.length }));
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});

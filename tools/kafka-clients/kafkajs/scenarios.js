#!/usr/bin/env node
// Ordinary kafkajs code against fencelog's Kafka listener, run by tests/kafka/kafka_client_scenarios.rs:
//
//     node scenarios.js BOOTSTRAP TOPIC GROUP
//
// admin.createTopics (TOPIC, 2 partitions) and fetchTopicMetadata; a producer with
// `idempotent: true` and a plain one each send 4 keyed records with headers (acks -1); a
// consumer group `run` with `eachMessage` reads all 8 back; admin.fetchOffsets, listGroups and
// describeGroups show the group. Prints one JSON object; exits non-zero on any error.

const { Kafka, logLevel } = require('kafkajs');

const DEADLINE_MS = 30000;

async function main() {
  const [bootstrap, topic, groupId] = process.argv.slice(2);
  const kafka = new Kafka({ clientId: 'kafkajs-scenario', brokers: [bootstrap], logLevel: logLevel.ERROR });
  const admin = kafka.admin();
  await admin.connect();
  const created = await admin.createTopics({ topics: [{ topic, numPartitions: 2 }], waitForLeaders: true });
  const metadata = await admin.fetchTopicMetadata({ topics: [topic] });
  const partitions = metadata.topics[0].partitions.map((p) => p.partitionId).sort();

  const produced = [];
  for (const idempotent of [true, false]) {
    const producer = kafka.producer(idempotent ? { idempotent: true } : {});
    await producer.connect();
    const messages = [0, 1, 2, 3].map((i) => ({
      key: `${idempotent ? 'idempotent' : 'plain'}-${i}`,
      value: `value-${i}`,
      partition: i % 2,
      headers: { index: `${i}` },
    }));
    const result = await producer.send({ topic, acks: -1, messages });
    produced.push(...result.map((r) => [r.partition, r.errorCode]));
    await producer.disconnect();
  }

  const consumer = kafka.consumer({ groupId, sessionTimeout: 6000, heartbeatInterval: 300 });
  await consumer.connect();
  await consumer.subscribe({ topics: [topic], fromBeginning: true });
  const read = [];
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`read ${read.length} of 8 records in time`)), DEADLINE_MS);
    consumer.run({
      eachMessage: async ({ partition, message }) => {
        read.push([partition, Number(message.offset), message.key.toString(), message.value.toString(),
          message.headers.index.toString()]);
        if (read.length === 8) {
          clearTimeout(timer);
          resolve();
        }
      },
    }).catch(reject);
  });
  // kafkajs commits what eachMessage finished when the consumer stops.
  await consumer.disconnect();
  const offsets = await admin.fetchOffsets({ groupId, topics: [topic] });
  const groups = await admin.listGroups();
  const described = await admin.describeGroups([groupId]);
  await admin.disconnect();
  read.sort();
  console.log(JSON.stringify({
    created,
    partitions,
    produced,
    read,
    offsets: offsets[0].partitions.map((p) => [p.partition, p.offset]).sort(),
    listed: groups.groups.filter((g) => g.groupId === groupId).length,
    state: described.groups[0].state,
  }));
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});

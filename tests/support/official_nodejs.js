// Runs one scenario with the official Node.js client (rocketmq-client-nodejs, installed by
// tests/compat/nodejs.py) and reports it as JSON lines on stdout, as official_client.py
// does for the Python client: the scenario comes as JSON on stdin; every line is
// {"event": ...}; the last is {"event": "done"}, or {"event": "error", ...} when it failed.
//
// Usage: ROCKETMQ_NODEJS_CLIENT=<dir with node_modules> node official_nodejs.js < scenario.json
'use strict';

const path = require('node:path');

const client = require(path.join(process.env.ROCKETMQ_NODEJS_CLIENT, 'node_modules',
  'rocketmq-client-nodejs'));
const { Producer, SimpleConsumer, FilterExpression } = client;

const SQL = 2; // apache.rocketmq.v2.FilterType.SQL

function emit(event, fields) {
  process.stdout.write(JSON.stringify({ event, ...fields }) + '\n');
}

function described(message) {
  return {
    id: message.messageId,
    body: message.body.toString('latin1'),
    tag: message.tag,
    group: message.messageGroup,
    attempt: message.deliveryAttempt,
    properties: Object.fromEntries(message.properties || new Map()),
  };
}

function errorFields(error) {
  return { type: error && error.constructor ? error.constructor.name : 'Error',
    message: String(error && error.message ? error.message : error) };
}

async function produce(scenario) {
  // With topics, startup waits for the node's first Settings answer, which it applies
  // (the 1.0.8 client crashed here when the answer had no backoff policy).
  const producer = new Producer({
    endpoints: scenario.endpoint, namespace: '', requestTimeout: 5000, topics: scenario.topics,
  });
  await producer.startup();
  try {
    for (const spec of scenario.messages) {
      const message = { topic: spec.topic, body: Buffer.from(spec.body, 'latin1') };
      if (spec.tag) message.tag = spec.tag;
      if (spec.group) message.messageGroup = spec.group;
      if (spec.properties) message.properties = new Map(Object.entries(spec.properties));
      try {
        const receipt = await producer.send(message);
        emit('sent', { body: spec.body, id: receipt.messageId });
      } catch (error) {
        emit('send_failed', { body: spec.body, ...errorFields(error) });
      }
    }
  } finally {
    await producer.shutdown();
  }
}

async function produceFor(scenario) {
  // One send at a time, every pace_ms, bodies p0..p<count-1>: each "sent" or "send_failed"
  // says when it completed (ms since the first send), so a test sees how long a failover
  // stopped this client's writes.
  const producer = new Producer({
    endpoints: scenario.endpoint, namespace: '', requestTimeout: 3000, topics: [ scenario.topic ],
  });
  await producer.startup();
  const started = Date.now();
  try {
    for (let i = 0; i < scenario.count; i += 1) {
      const body = `p${i}`;
      try {
        const receipt = await producer.send({ topic: scenario.topic, body: Buffer.from(body) });
        emit('sent', { body, id: receipt.messageId, ms: Date.now() - started });
      } catch (error) {
        emit('send_failed', { body, ms: Date.now() - started, ...errorFields(error) });
      }
      await new Promise(resolve => setTimeout(resolve, scenario.pace_ms));
    }
  } finally {
    await producer.shutdown();
  }
}

// Seconds on CLOCK_MONOTONIC (libuv's hrtime): the clock a failover drill kills by
// (bench/official_failover.py compares these stamps with time.monotonic()).
function monotonic() {
  return Number(process.hrtime.bigint()) / 1e9;
}

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

async function load(scenario) {
  // A failover drill's load, as bench/official_failover.py's for the Python client: one
  // send at a time and a SimpleConsumer receiving and acking, until the stop file exists;
  // then the consumer drains until it has every acknowledged message, or nothing new came
  // for drain_idle_s, or drain_s passed. Events: ready, sent / send_failed (body, t0, t1),
  // received (body, t, attempt), ack_failed, receive_failed.
  const fs = require('node:fs');
  const producer = new Producer({
    endpoints: scenario.endpoint, namespace: '', requestTimeout: 3000, topics: [ scenario.topic ],
  });
  const consumer = new SimpleConsumer({
    endpoints: scenario.endpoint,
    namespace: '',
    consumerGroup: scenario.group,
    subscriptions: new Map([[ scenario.topic, new FilterExpression('*') ]]),
    awaitDuration: (scenario.await_s || 2) * 1000,
    requestTimeout: 3000,
  });
  await producer.startup();
  await consumer.startup();
  const acked = new Set();
  const received = new Set();
  let stopped = false;
  let producing = true;
  const produceLoop = (async () => {
    for (let i = 0; !stopped; i += 1) {
      const body = `m-${i}`;
      const t0 = monotonic();
      try {
        await producer.send({ topic: scenario.topic, body: Buffer.from(body) });
        acked.add(body);
        emit('sent', { body, t0, t1: monotonic() });
      } catch (error) {
        emit('send_failed', { body, t0, t1: monotonic(), ...errorFields(error) });
      }
      if (scenario.pause_s) await sleep(scenario.pause_s * 1000);
    }
    producing = false;
  })();
  let drainUntil = Infinity;
  let lastNew = monotonic();
  const drained = () => {
    if (!stopped || producing) return false;
    const now = monotonic();
    const all = [ ...acked ].every(body => received.has(body));
    return all || now > drainUntil || now - lastNew > (scenario.drain_idle_s || 15);
  };
  const consumeLoop = (async () => {
    while (!drained()) {
      const t0 = monotonic();
      let messages;
      try {
        messages = await consumer.receive(16, (scenario.invisible_s || 5) * 1000);
      } catch (error) {
        emit('receive_failed', { t0, t1: monotonic(), ...errorFields(error) });
        await sleep(50);
        continue;
      }
      for (const message of messages) {
        const body = message.body.toString();
        if (!received.has(body)) lastNew = monotonic();
        received.add(body);
        emit('received', { body, t: monotonic(), attempt: message.deliveryAttempt });
        try {
          await consumer.ack(message);
        } catch (error) {
          emit('ack_failed', { body, t: monotonic(), ...errorFields(error) });
        }
      }
    }
  })();
  emit('ready', { t: monotonic() });
  while (!fs.existsSync(scenario.stop_file)) await sleep(20);
  drainUntil = monotonic() + (scenario.drain_s || 300);
  stopped = true;
  await produceLoop;
  await consumeLoop;
  await producer.shutdown();
  await consumer.shutdown();
}

async function simple(scenario) {
  const filter = scenario.sql
    ? new FilterExpression(scenario.sql, SQL)
    : new FilterExpression(scenario.filter || '*');
  const consumer = new SimpleConsumer({
    endpoints: scenario.endpoint,
    namespace: '',
    consumerGroup: scenario.group,
    subscriptions: new Map([[ scenario.topic, filter ]]),
    awaitDuration: (scenario.await_s || 2) * 1000,
    requestTimeout: 5000,
  });
  await consumer.startup();
  const held = new Map();
  try {
    for (const step of scenario.steps) {
      if (step.do === 'receive_until') {
        const deadline = Date.now() + step.deadline_s * 1000;
        let got = 0;
        while (got < step.count && Date.now() < deadline) {
          const messages = await consumer.receive(step.max || 16, step.invisible_s * 1000);
          for (const message of messages) {
            got += 1;
            held.set(message.messageId, message);
            emit('received', described(message));
            if (step.ack) {
              await consumer.ack(message);
              emit('acked', { id: message.messageId });
            }
          }
        }
      } else if (step.do === 'change') {
        const message = held.get(step.id);
        await consumer.changeInvisibleDuration(message, step.invisible_s * 1000);
        emit('changed', { id: step.id });
      } else if (step.do === 'ack') {
        for (const id of step.ids) {
          await consumer.ack(held.get(id));
          emit('acked', { id });
        }
      }
    }
  } finally {
    await consumer.shutdown();
  }
}

async function main() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  const scenario = JSON.parse(Buffer.concat(chunks).toString('utf8'));
  const scenarios = { produce, produce_for: produceFor, simple, load };
  try {
    await scenarios[scenario.scenario](scenario);
  } catch (error) {
    emit('error', errorFields(error));
    process.exit(1);
  }
  emit('done', {});
  process.exit(0); // the client's timers would keep the process alive
}

main();

'use strict';
// Drives the ali-ons RocketMQ remoting client (pure JavaScript) through the steps of a JSON
// spec (the first argument, else standard input) and prints what happened as JSON lines,
// the last {"event": "done"}.
//
//   {"namesrv": "host:port", "steps": [
//     {"do": "produce", "group", "messages": [{"topic", "body", "tags", "keys": [..],
//          "properties": {..}, "delay_level": n}]},
//     {"do": "push", "group", "topic", "expression", "sql": bool, "broadcast": bool,
//          "instances": n, "max_reconsume": n, "fail": [bodies], "fail_attempts": n,
//          "expect": [bodies], "deadline_s", "linger_s"},
//     {"do": "load", "topic", "group", "stop_file", "pause_ms", "drain_idle_s", "drain_s"}]}
//
// ali-ons fetches the name server list over HTTP unless it is given one, and insists on an
// HTTP client either way: it is given the address and a client that is never called.

const fs = require('fs');
const path = require('path');
const { Consumer, Producer, Message } = require('ali-ons');
const ConsumeFromWhere = require('ali-ons/lib/consumer/consume_from_where');

const unusedHttpClient = {
  async request() {
    throw new Error('the driver gives ali-ons its name server: no HTTP lookup expected');
  },
};

const logDir = path.join(process.env.HOME || '.', 'logs');
fs.mkdirSync(logDir, { recursive: true });
const logFile = fs.createWriteStream(path.join(logDir, 'ali-ons.log'), { flags: 'a' });
const write = level => (...args) => logFile.write(`${new Date().toISOString()} ${level} ${args.map(String).join(' ')}\n`);
const logger = { debug() {}, info: write('INFO'), warn: write('WARN'), error: write('ERROR') };

function emit(event, fields) {
  process.stdout.write(JSON.stringify(Object.assign({ event }, fields)) + '\n');
}

function failed(event, err, fields) {
  emit(event, Object.assign({}, fields, { type: err && err.name, message: String(err && err.message) }));
}

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));
let instances = 0;
const instance = role => `driver-${role}-${++instances}-${process.pid}`;

function options(spec, role, extra) {
  return Object.assign({
    httpclient: unusedHttpClient,
    nameSrv: spec.namesrv,
    instanceName: instance(role),
    logger,
  }, extra);
}

async function produce(spec, step) {
  const producer = new Producer(options(spec, 'producer', {
    producerGroup: step.group || 'driver-producer',
    sendMsgTimeout: 15000,
  }));
  producer.on('error', err => failed('client_error', err, { client: 'producer' }));
  await producer.ready();
  try {
    for (const m of step.messages || []) {
      const message = new Message(m.topic, m.tags || null, m.body || '');
      if (m.keys && m.keys.length) message.keys = m.keys;
      if (m.delay_level) message.delayTimeLevel = m.delay_level;
      for (const [k, v] of Object.entries(m.properties || {})) message.properties[k] = String(v);
      try {
        const result = await producer.send(message);
        emit('sent', {
          body: m.body, id: result.msgId, status: result.sendStatus,
          queue: result.messageQueue && result.messageQueue.queueId,
          broker: result.messageQueue && result.messageQueue.brokerName,
          queue_offset: Number(result.queueOffset),
        });
      } catch (err) {
        failed('send_failed', err, { body: m.body });
      }
    }
  } finally {
    await producer.close();
  }
}

function describe(msg, name) {
  return {
    id: msg.msgId,
    topic: msg.topic,
    body: msg.body.toString(),
    tags: msg.tags || null,
    keys: msg.keys ? msg.keys.split(' ').filter(Boolean) : [],
    properties: Object.assign({}, msg.properties),
    queue: msg.queueId,
    queue_offset: Number(msg.queueOffset),
    reconsume_times: msg.reconsumeTimes,
    born_timestamp: Number(msg.bornTimestamp),
    store_timestamp: Number(msg.storeTimestamp),
    received_at: Date.now(),
    instance: name,
  };
}

async function push(spec, step) {
  const fail = new Set(step.fail || []);
  const expect = step.expect || [];
  const failAttempts = step.fail_attempts || 1;
  const succeeded = new Map();
  const failures = new Map();
  const consumers = [];
  try {
    for (let i = 0; i < (step.instances || 1); i++) {
      const extra = {
        consumerGroup: step.group,
        isBroadcast: !!step.broadcast,
        consumeFromWhere: ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
      };
      if (step.max_reconsume !== undefined) extra.maxReconsumeTimes = step.max_reconsume;
      const settings = options(spec, 'push', extra);
      const name = settings.instanceName;
      succeeded.set(name, new Set());
      const consumer = new Consumer(settings);
      consumer.on('error', err => {
        if (!String(err.message).includes('driver: fail')) failed('client_error', err, { client: name });
      });
      const expression = step.sql ?
        { expressionType: 'SQL92', subString: step.expression } : (step.expression || '*');
      consumer.subscribe(step.topic, expression, async msg => {
        const body = msg.body.toString();
        const failing = fail.has(body);
        emit('consumed', Object.assign(describe(msg, name), { failed: failing }));
        if (failing) {
          failures.set(body, (failures.get(body) || 0) + 1);
          // Not Consumer.ACTION_RETRY: 3.12.0 ignores it for a message redelivered from
          // the retry topic (its handler there drops the return value), a throw retries.
          throw new Error(`driver: fail ${body}`);
        }
        succeeded.get(name).add(body);
      });
      consumers.push(consumer);
    }
    await Promise.all(consumers.map(c => c.ready()));
    const deadline = Date.now() + (step.deadline_s || 30) * 1000;
    let all = false;
    while (!all && Date.now() < deadline) {
      const union = new Set();
      for (const seen of succeeded.values()) for (const b of seen) union.add(b);
      all = expect.every(b => union.has(b));
      if (step.broadcast) {
        all = all && [ ...succeeded.values() ].every(seen => expect.every(b => seen.has(b)));
      }
      all = all && [ ...fail ].every(b => (failures.get(b) || 0) >= failAttempts);
      if (!all) await sleep(100);
    }
    emit('push_waited', { all_seen: all });
    await sleep((step.linger_s || 0) * 1000);
  } finally {
    for (const consumer of consumers) await consumer.close();
  }
}

// Seconds on CLOCK_MONOTONIC (libuv's hrtime), the clock a failover drill kills by.
const monotonic = () => Number(process.hrtime.bigint()) / 1e9;

// A failover drill's load (as bench/official_failover.py's for the Python client): one
// send at a time (the client's own retries) and a push consumer, until the stop file
// exists; then the consumer drains until it has every acknowledged message, or nothing
// new came for drain_idle_s (15), or drain_s (300) passed. Events: ready (t), sent /
// send_failed (body, t0, t1), received (body, t, attempt).
async function load(spec, step) {
  const producer = new Producer(options(spec, 'producer', {
    producerGroup: 'drill-producer',
    sendMsgTimeout: 3000,
  }));
  producer.on('error', err => failed('client_error', err, { client: 'producer' }));
  const consumer = new Consumer(options(spec, 'push', {
    consumerGroup: step.group,
    consumeFromWhere: ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
  }));
  consumer.on('error', err => failed('client_error', err, { client: 'push' }));
  const acked = new Set();
  const received = new Set();
  let lastNew = monotonic();
  consumer.subscribe(step.topic, '*', async msg => {
    const body = msg.body.toString();
    if (!received.has(body)) {
      received.add(body);
      lastNew = monotonic();
    }
    emit('received', { body, t: monotonic(), attempt: msg.reconsumeTimes + 1 });
  });
  await Promise.all([ producer.ready(), consumer.ready() ]);
  emit('ready', { t: monotonic() });
  try {
    for (let i = 0; !fs.existsSync(step.stop_file); i++) {
      const body = `m-${i}`;
      const t0 = monotonic();
      try {
        await producer.send(new Message(step.topic, null, body));
        acked.add(body);
        emit('sent', { body, t0, t1: monotonic() });
      } catch (err) {
        failed('send_failed', err, { body, t0, t1: monotonic() });
      }
      if (step.pause_ms) await sleep(step.pause_ms);
    }
    const until = monotonic() + (step.drain_s || 300);
    const idle = step.drain_idle_s || 15;
    while (![ ...acked ].every(b => received.has(b)) && monotonic() < until &&
      monotonic() - lastNew < idle) {
      await sleep(50);
    }
  } finally {
    await consumer.close();
    await producer.close();
  }
}

async function main() {
  const raw = process.argv[2] && process.argv[2] !== '-' ?
    process.argv[2] : fs.readFileSync(0, 'utf8');
  const spec = JSON.parse(raw);
  let failedSteps = 0;
  for (const step of spec.steps || []) {
    try {
      if (step.do === 'produce') await produce(spec, step);
      else if (step.do === 'push') await push(spec, step);
      else if (step.do === 'load') await load(spec, step);
      else throw new Error(`unknown step ${step.do}`);
    } catch (err) {
      failed('step_failed', err, { step: step.do });
      failedSteps++;
    }
  }
  emit('done', { failed_steps: failedSteps });
  logFile.end(() => process.exit(0));
}

main().catch(err => {
  failed('step_failed', err, { step: 'main' });
  emit('done', { failed_steps: 1 });
  process.exit(0);
});

import com.google.gson.JsonObject;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.QueryResult;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.MessageQueueSelector;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageClientExt;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.protocol.heartbeat.MessageModel;
import org.apache.rocketmq.remoting.RPCHook;

/**
 * Drives the official Java 4.x remoting client (rocketmq-client 4.9.x) through the steps of
 * a JSON spec and prints what happened as JSON lines, the last {"event": "done"}.
 *
 * <pre>
 * {"namesrv": "host:port",
 *  "acl": {"access_key", "secret_key"} (every client signs with AclClientRPCHook),
 *  "system_properties": {name: value} (set first: e.g. "tls.enable": "true"),
 *  "steps": [
 *   {"do": "produce", "group", "batch": bool, "messages": [{"topic", "body", "tags",
 *        "keys": [..], "properties": {..}, "mode": "sync|async|oneway",
 *        "delay_level": n, "order_key": "k" (MessageQueueSelector by the key's hash)}],
 *        "interval_ms": n (a pause after each send)},
 *   {"do": "transaction", "group", "topic", "messages": [{"body", "tags", "keys",
 *        "local": "COMMIT_MESSAGE|ROLLBACK_MESSAGE|UNKNOW"}],
 *        "check_answer": "COMMIT_MESSAGE|ROLLBACK_MESSAGE|UNKNOW", "checks": n,
 *        "wait_for_check_s": s, "linger_s" (after the checks; 3 s by default)},
 *   {"do": "push", "group", "topic", "expression", "sql": bool, "orderly": bool,
 *        "broadcast": bool, "instances": n, "max_reconsume": n, "fail": [bodies],
 *        "fail_attempts": n, "expect": [bodies], "deadline_s", "linger_s"},
 *   {"do": "lite_pull", "group", "topic", "expression", "expect": [bodies], "deadline_s"},
 *   {"do": "query_key", "topic", "key", "count", "deadline_s"},
 *   {"do": "load", "topic", "group", "stop_file", "pause_ms", "drain_idle_s", "drain_s"}]}
 * </pre>
 *
 * Events: sent, send_failed, checked, consumed, push_waited, pulled, pull_waited, queried,
 * step_failed, done. "consumed" and "pulled" carry the message as the client sees it.
 */
public final class Remoting4Driver {
    private final String namesrv;
    private final RPCHook rpcHook;
    private int instances;

    private Remoting4Driver(String namesrv, RPCHook rpcHook) {
        this.namesrv = namesrv;
        this.rpcHook = rpcHook;
    }

    private static RPCHook aclHook(JsonObject spec) {
        if (!spec.has("acl")) {
            return null;
        }
        JsonObject acl = spec.getAsJsonObject("acl");
        return new AclClientRPCHook(
            new SessionCredentials(Out.str(acl, "access_key", ""), Out.str(acl, "secret_key", "")));
    }

    public static void main(String[] args) {
        JsonObject spec = Out.readSpec(args);
        // Before any client class reads them (TlsSystemConfig reads tls.* once, when loaded).
        for (Map.Entry<String, String> p : Out.stringMap(spec, "system_properties").entrySet()) {
            System.setProperty(p.getKey(), p.getValue());
        }
        Remoting4Driver driver = new Remoting4Driver(Out.str(spec, "namesrv", ""), aclHook(spec));
        Out.runSteps(Out.objects(spec, "steps"), 0, Map.of(
            "produce", driver::produce,
            "transaction", driver::transaction,
            "push", driver::push,
            "lite_pull", driver::litePull,
            "query_key", driver::queryKey,
            "load", driver::load));
    }

    /** Seconds on CLOCK_MONOTONIC (System.nanoTime on Linux): the clock a drill kills by. */
    private static double monotonic() {
        return System.nanoTime() / 1e9;
    }

    /**
     * A failover drill's load (as bench/official_failover.py's for the Python client): one
     * sync send at a time (the client's own retries) and a push consumer, until the stop file
     * exists; then the consumer drains until it has every acknowledged message, or nothing
     * new came for drain_idle_s (15), or drain_s (300) passed. Events: ready (t), sent /
     * send_failed (body, t0, t1), received (body, t, attempt).
     */
    private void load(JsonObject step) throws Exception {
        String topic = Out.str(step, "topic", "");
        long pauseMs = Out.num(step, "pause_ms", 0);
        java.nio.file.Path stopFile = java.nio.file.Path.of(Out.str(step, "stop_file", ""));
        DefaultMQProducer producer = new DefaultMQProducer("drill-producer", rpcHook);
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName(instance("producer"));
        producer.setSendMsgTimeout(3000);
        producer.start();
        Set<String> acked = ConcurrentHashMap.newKeySet();
        Set<String> received = ConcurrentHashMap.newKeySet();
        double[] lastNew = {monotonic()};
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(
            Out.str(step, "group", ""), rpcHook, new AllocateMessageQueueAveragely());
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName(instance("push"));
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            for (MessageExt m : messages) {
                String body = Out.utf8(m.getBody());
                if (received.add(body)) {
                    lastNew[0] = monotonic();
                }
                Out.emit("received", "body", body, "t", monotonic(), "attempt", m.getReconsumeTimes() + 1);
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        java.util.concurrent.atomic.AtomicBoolean stopped = new java.util.concurrent.atomic.AtomicBoolean();
        Thread producing = new Thread(() -> {
            for (int i = 0; !stopped.get(); i++) {
                String body = "m-" + i;
                double t0 = monotonic();
                try {
                    producer.send(new Message(topic, Out.bytes(body)));
                    acked.add(body);
                    Out.emit("sent", "body", body, "t0", t0, "t1", monotonic());
                } catch (Exception e) {
                    Out.emit("send_failed", "body", body, "t0", t0, "t1", monotonic(),
                        "type", e.getClass().getSimpleName(), "message", String.valueOf(e.getMessage()));
                }
                if (pauseMs > 0) {
                    Out.sleepMillis(pauseMs);
                }
            }
        });
        producing.start();
        Out.emit("ready", "t", monotonic());
        try {
            while (!java.nio.file.Files.exists(stopFile)) {
                Out.sleepMillis(20);
            }
            stopped.set(true);
            producing.join();
            double until = monotonic() + Out.real(step, "drain_s", 300);
            double idle = Out.real(step, "drain_idle_s", 15);
            while (!received.containsAll(acked) && monotonic() < until
                && monotonic() - lastNew[0] < idle) {
                Out.sleepMillis(50);
            }
        } finally {
            consumer.shutdown();
            producer.shutdown();
        }
    }

    private String instance(String role) {
        return "driver-" + role + "-" + (instances++) + "-" + ProcessHandle.current().pid();
    }

    // ---- producing ---------------------------------------------------------------------
    private static Message message(String topic, JsonObject m) {
        Message message = new Message(topic, Out.bytes(Out.str(m, "body", "")));
        String tags = Out.str(m, "tags", null);
        if (tags != null) {
            message.setTags(tags);
        }
        List<String> keys = Out.strings(m, "keys");
        if (!keys.isEmpty()) {
            message.setKeys(keys);
        }
        long level = Out.num(m, "delay_level", 0);
        if (level > 0) {
            message.setDelayTimeLevel((int) level);
        }
        for (Map.Entry<String, String> p : Out.stringMap(m, "properties").entrySet()) {
            message.putUserProperty(p.getKey(), p.getValue());
        }
        return message;
    }

    private static void sent(String body, String mode, SendResult result) {
        MessageQueue queue = result.getMessageQueue();
        Out.emit("sent", "body", body, "mode", mode, "id", result.getMsgId(),
            "offset_id", result.getOffsetMsgId(), "status", result.getSendStatus().name(),
            "queue", queue == null ? null : queue.getQueueId(),
            "broker", queue == null ? null : queue.getBrokerName(),
            "queue_offset", result.getQueueOffset());
    }

    private static final MessageQueueSelector BY_KEY_HASH = (queues, message, key) ->
        queues.get(Math.floorMod(key.hashCode(), queues.size()));

    private DefaultMQProducer producer(String group) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer(group, rpcHook);
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName(instance("producer"));
        producer.setSendMsgTimeout(15000);
        producer.start();
        return producer;
    }

    private void produce(JsonObject step) throws Exception {
        DefaultMQProducer producer = producer(Out.str(step, "group", "driver-producer"));
        try {
            List<JsonObject> messages = Out.objects(step, "messages");
            if (Out.bool(step, "batch", false)) {
                sendBatch(producer, messages);
                return;
            }
            CountDownLatch pending = new CountDownLatch(
                (int) messages.stream().filter(m -> Out.str(m, "mode", "sync").equals("async")).count());
            for (JsonObject m : messages) {
                String body = Out.str(m, "body", "");
                String mode = Out.str(m, "mode", "sync");
                Message message = message(Out.str(m, "topic", ""), m);
                String orderKey = Out.str(m, "order_key", null);
                try {
                    if (mode.equals("async")) {
                        producer.send(message, new SendCallback() {
                            @Override
                            public void onSuccess(SendResult result) {
                                sent(body, mode, result);
                                pending.countDown();
                            }

                            @Override
                            public void onException(Throwable e) {
                                Out.failed("send_failed", e, "body", body, "mode", mode);
                                pending.countDown();
                            }
                        }, 15000);
                    } else if (mode.equals("oneway")) {
                        producer.sendOneway(message);
                        Out.emit("sent", "body", body, "mode", mode,
                            "id", MessageClientIDSetter.getUniqID(message));
                    } else if (orderKey != null) {
                        sent(body, "orderly", producer.send(message, BY_KEY_HASH, orderKey));
                    } else {
                        sent(body, mode, producer.send(message));
                    }
                } catch (Exception e) {
                    Out.failed("send_failed", e, "body", body, "mode", mode);
                }
                Out.sleepMillis(Out.num(step, "interval_ms", 0));
            }
            pending.await(60, TimeUnit.SECONDS);
        } finally {
            producer.shutdown();
        }
    }

    private static void sendBatch(DefaultMQProducer producer, List<JsonObject> specs) {
        List<Message> batch = new ArrayList<>();
        List<String> bodies = new ArrayList<>();
        for (JsonObject m : specs) {
            batch.add(message(Out.str(m, "topic", ""), m));
            bodies.add(Out.str(m, "body", ""));
        }
        try {
            SendResult result = producer.send(batch);
            String[] ids = result.getMsgId().split(",");
            String[] offsetIds = result.getOffsetMsgId() == null
                ? new String[0] : result.getOffsetMsgId().split(",");
            for (int i = 0; i < bodies.size(); i++) {
                Out.emit("sent", "body", bodies.get(i), "mode", "batch",
                    "id", i < ids.length ? ids[i] : null,
                    "offset_id", i < offsetIds.length ? offsetIds[i] : null,
                    "status", result.getSendStatus().name(),
                    "queue", result.getMessageQueue().getQueueId(),
                    "queue_offset", result.getQueueOffset() + i);
            }
        } catch (Exception e) {
            for (String body : bodies) {
                Out.failed("send_failed", e, "body", body, "mode", "batch");
            }
        }
    }

    private void transaction(JsonObject step) throws Exception {
        String topic = Out.str(step, "topic", "");
        LocalTransactionState answer = LocalTransactionState.valueOf(
            Out.str(step, "check_answer", "COMMIT_MESSAGE"));
        AtomicInteger checks = new AtomicInteger();
        TransactionMQProducer producer = new TransactionMQProducer(Out.str(step, "group", "driver-tx"), rpcHook);
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName(instance("tx"));
        producer.setSendMsgTimeout(15000);
        producer.setTransactionListener(new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message message, Object local) {
                return LocalTransactionState.valueOf((String) local);
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt message) {
                checks.incrementAndGet();
                Out.emit("checked", "body", Out.utf8(message.getBody()), "id", message.getMsgId(),
                    "transaction_id", message.getTransactionId(), "answer", answer.name());
                return answer;
            }
        });
        producer.start();
        try {
            for (JsonObject m : Out.objects(step, "messages")) {
                String body = Out.str(m, "body", "");
                String local = Out.str(m, "local", "COMMIT_MESSAGE");
                try {
                    TransactionSendResult result = producer.sendMessageInTransaction(message(topic, m), local);
                    sent(body, "transaction", result);
                    Out.emit("local_state", "body", body, "state", result.getLocalTransactionState().name(),
                        "transaction_id", result.getTransactionId());
                } catch (Exception e) {
                    Out.failed("send_failed", e, "body", body, "mode", "transaction");
                }
            }
            long deadline = System.nanoTime() + (long) (Out.real(step, "wait_for_check_s", 0) * 1e9);
            while (checks.get() < Out.num(step, "checks", 0) && System.nanoTime() < deadline) {
                Out.sleepMillis(100);
            }
            Out.sleepMillis((long) (Out.checkAnswerLingerS(step) * 1000));
        } finally {
            producer.shutdown();
        }
    }

    // ---- consuming ---------------------------------------------------------------------
    private static Object[] describe(MessageExt m, String instance) {
        Map<String, String> user = new LinkedHashMap<>();
        for (Map.Entry<String, String> p : m.getProperties().entrySet()) {
            user.put(p.getKey(), p.getValue());
        }
        return new Object[] {
            "id", m.getMsgId(),
            "offset_id", m instanceof MessageClientExt ? ((MessageClientExt) m).getOffsetMsgId() : null,
            "topic", m.getTopic(),
            "body", new String(m.getBody(), StandardCharsets.UTF_8),
            "tags", m.getTags(),
            "keys", m.getKeys() == null ? new ArrayList<String>() : List.of(m.getKeys().split(" ")),
            "properties", user,
            "queue", m.getQueueId(),
            "queue_offset", m.getQueueOffset(),
            "reconsume_times", m.getReconsumeTimes(),
            "born_timestamp", m.getBornTimestamp(),
            "store_timestamp", m.getStoreTimestamp(),
            "received_at", System.currentTimeMillis(),
            "instance", instance,
        };
    }

    private static Object[] with(Object[] first, Object... more) {
        Object[] all = new Object[first.length + more.length];
        System.arraycopy(first, 0, all, 0, first.length);
        System.arraycopy(more, 0, all, first.length, more.length);
        return all;
    }

    private void push(JsonObject step) throws Exception {
        Set<String> fail = new HashSet<>(Out.strings(step, "fail"));
        Set<String> expect = new HashSet<>(Out.strings(step, "expect"));
        long failAttempts = Out.num(step, "fail_attempts", 1);
        boolean broadcast = Out.bool(step, "broadcast", false);
        int count = (int) Out.num(step, "instances", 1);
        Map<String, Set<String>> succeeded = new ConcurrentHashMap<>();
        Map<String, AtomicInteger> failures = new ConcurrentHashMap<>();
        List<DefaultMQPushConsumer> consumers = new ArrayList<>();
        List<String> names = new ArrayList<>();
        try {
            for (int i = 0; i < count; i++) {
                String name = instance("push");
                names.add(name);
                succeeded.put(name, ConcurrentHashMap.newKeySet());
                DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(
                    Out.str(step, "group", ""), rpcHook, new AllocateMessageQueueAveragely());
                consumer.setNamesrvAddr(namesrv);
                consumer.setInstanceName(name);
                consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
                consumer.setMessageModel(broadcast ? MessageModel.BROADCASTING : MessageModel.CLUSTERING);
                consumer.setConsumeThreadMin(2);
                consumer.setConsumeThreadMax(4);
                if (step.has("max_reconsume")) {
                    consumer.setMaxReconsumeTimes((int) Out.num(step, "max_reconsume", 16));
                }
                String expression = Out.str(step, "expression", "*");
                if (Out.bool(step, "sql", false)) {
                    consumer.subscribe(Out.str(step, "topic", ""), MessageSelector.bySql(expression));
                } else {
                    consumer.subscribe(Out.str(step, "topic", ""), expression);
                }
                if (Out.bool(step, "orderly", false)) {
                    consumer.registerMessageListener((MessageListenerOrderly) (messages, context) -> {
                        context.setSuspendCurrentQueueTimeMillis(300);
                        for (MessageExt m : messages) {
                            if (!handle(m, name, fail, succeeded, failures)) {
                                return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT;
                            }
                        }
                        return ConsumeOrderlyStatus.SUCCESS;
                    });
                } else {
                    consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
                        for (MessageExt m : messages) {
                            if (!handle(m, name, fail, succeeded, failures)) {
                                return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                            }
                        }
                        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
                    });
                }
                consumer.start();
                consumers.add(consumer);
            }
            long deadline = System.nanoTime() + (long) (Out.real(step, "deadline_s", 30) * 1e9);
            boolean all = false;
            while (!all && System.nanoTime() < deadline) {
                all = true;
                for (String name : names) {
                    all &= succeeded.get(name).containsAll(expect);
                }
                if (!broadcast) {
                    Set<String> union = new HashSet<>();
                    succeeded.values().forEach(union::addAll);
                    all = union.containsAll(expect);
                }
                for (String body : fail) {
                    AtomicInteger seen = failures.get(body);
                    all &= seen != null && seen.get() >= failAttempts;
                }
                if (!all) {
                    Out.sleepMillis(100);
                }
            }
            Out.emit("push_waited", "all_seen", all);
            Out.sleepMillis((long) (Out.real(step, "linger_s", 0) * 1000));
        } finally {
            for (DefaultMQPushConsumer consumer : consumers) {
                consumer.shutdown();
            }
        }
    }

    private static boolean handle(MessageExt m, String instance, Set<String> fail,
        Map<String, Set<String>> succeeded, Map<String, AtomicInteger> failures) {
        String body = Out.utf8(m.getBody());
        boolean failed = fail.contains(body);
        Out.emit("consumed", with(describe(m, instance), "failed", failed));
        if (failed) {
            failures.computeIfAbsent(body, b -> new AtomicInteger()).incrementAndGet();
            return false;
        }
        succeeded.get(instance).add(body);
        return true;
    }

    private void litePull(JsonObject step) throws Exception {
        Set<String> expect = new HashSet<>(Out.strings(step, "expect"));
        String name = instance("lite");
        DefaultLitePullConsumer consumer = new DefaultLitePullConsumer(Out.str(step, "group", ""), rpcHook);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName(name);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setAutoCommit(true);
        consumer.subscribe(Out.str(step, "topic", ""), Out.str(step, "expression", "*"));
        consumer.start();
        Set<String> seen = new HashSet<>();
        try {
            long deadline = System.nanoTime() + (long) (Out.real(step, "deadline_s", 30) * 1e9);
            while (!seen.containsAll(expect) && System.nanoTime() < deadline) {
                for (MessageExt m : consumer.poll(1000)) {
                    seen.add(Out.utf8(m.getBody()));
                    Out.emit("pulled", describe(m, name));
                }
            }
            Out.emit("pull_waited", "all_seen", seen.containsAll(expect));
        } finally {
            consumer.shutdown();
        }
    }

    @SuppressWarnings("deprecation")
    private void queryKey(JsonObject step) throws Exception {
        DefaultMQProducer producer = producer("driver-query");
        try {
            String topic = Out.str(step, "topic", "");
            String key = Out.str(step, "key", "");
            long wanted = Out.num(step, "count", 1);
            long deadline = System.nanoTime() + (long) (Out.real(step, "deadline_s", 20) * 1e9);
            Collection<MessageExt> found = new ArrayList<>();
            Exception last = null;
            while (found.size() < wanted && System.nanoTime() < deadline) {
                try {
                    QueryResult result = producer.queryMessage(topic, key, 32, 0, Long.MAX_VALUE);
                    found = result.getMessageList();
                } catch (Exception e) {
                    last = e;
                }
                if (found.size() < wanted) {
                    Out.sleepMillis(500);
                }
            }
            for (MessageExt m : found) {
                Out.emit("queried", describe(m, "query"));
            }
            if (found.isEmpty() && last != null) {
                Out.failed("query_failed", last, "topic", topic, "key", key);
            }
        } finally {
            producer.shutdown();
        }
    }
}

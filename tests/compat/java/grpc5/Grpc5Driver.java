import com.google.gson.JsonObject;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientConfigurationBuilder;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.LitePushConsumer;
import org.apache.rocketmq.client.apis.consumer.OffsetOption;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageBuilder;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.ProducerBuilder;
import org.apache.rocketmq.client.apis.producer.RecallReceipt;
import org.apache.rocketmq.client.apis.producer.SendReceipt;
import org.apache.rocketmq.client.apis.producer.Transaction;
import org.apache.rocketmq.client.apis.producer.TransactionResolution;
import org.apache.rocketmq.client.java.impl.producer.SendReceiptImpl;

/**
 * Drives the official Java 5.x gRPC client (rocketmq-client-java) through the steps of a
 * JSON spec, one client per step, and prints what happened as JSON lines.
 *
 * <pre>
 * {"endpoints": "host:port", "tls": false, "steps": [
 *   {"do": "produce", "topics": [..], "messages": [{"topic", "body", "tag", "keys": [..],
 *        "properties": {..}, "group" (FIFO), "delay_ms" (DELAY), "priority" (PRIORITY),
 *        "async": bool,
 *        "recall": n (a sync send's message recalled n times after it is sent)}],
 *        "recall_handles": [{"topic", "body", "handle"}] (recalled after the sends)},
 *   {"do": "transaction", "topic", "messages": [{"body", "tag", "keys", "properties",
 *        "end": "commit|rollback|none"}], "checker": "COMMIT|ROLLBACK|UNKNOWN",
 *        "checks": n, "wait_for_check_s": s, "linger_s" (after the checks; 3 s by default)},
 *   {"do": "simple", "group", "topic", "expression", "sql": bool, "await_s",
 *        "ops": [{"op": "receive", "count", "max", "invisible_s", "deadline_s", "ack"},
 *                {"op": "ack", "bodies": [..]}, {"op": "change", "body", "invisible_s"},
 *                {"op": "sleep", "s"}]},
 *   {"do": "push", "group", "topic", "expression", "sql": bool, "fail": [bodies],
 *        "fail_attempts": n, "expect": [bodies], "threads", "deadline_s", "linger_s"}
 *        (or "consumers": [{"group", "topic", ...}, ..] with "deadline_s", "linger_s")],
 *   {"do": "load", "topic", "group", "stop_file", "pause_ms", "await_s", "invisible_s",
 *        "drain_idle_s", "drain_s"}}
 * </pre>
 *
 * <p>A "load" step is a failover drill's load (as bench/official_failover.py's for the
 * Python client): one producer sending one message at a time and a SimpleConsumer
 * receiving and acking, until the stop file exists; then the consumer drains until it has
 * every acknowledged message, or nothing new came for drain_idle_s (15), or drain_s (300)
 * passed. Its events carry monotonic seconds
 * (System.nanoTime, CLOCK_MONOTONIC on Linux: the clock the parent kills by): ready (t),
 * sent / send_failed (body, t0, t1), received (body, t, attempt), ack_failed,
 * receive_failed.
 *
 * Events: sent, send_failed, recalled, recall_failed, committed, rolled_back, end_failed, checked, received,
 * receive_failed, acked, ack_failed, changed, change_failed, consumed, push_waited,
 * step_failed, done.
 */
public final class Grpc5Driver {
    private final ClientServiceProvider provider = ClientServiceProvider.loadService();
    private final ClientConfiguration configuration;

    private Grpc5Driver(JsonObject spec) {
        ClientConfigurationBuilder builder = ClientConfiguration.newBuilder()
            .setEndpoints(spec.get("endpoints").getAsString())
            .setRequestTimeout(Duration.ofMillis(Out.num(spec, "request_timeout_ms", 10000)));
        if (spec.has("tls")) {  // else the client's default: TLS, any certificate accepted
            builder.enableSsl(Out.bool(spec, "tls", true));
        }
        this.configuration = builder.build();
    }

    public static void main(String[] args) {
        JsonObject spec = Out.readSpec(args);
        Grpc5Driver driver;
        try {
            driver = new Grpc5Driver(spec);
        } catch (Throwable t) {
            Out.failed("step_failed", t, "step", "configure");
            Out.runSteps(List.of(), 1, Map.of());
            return;
        }
        Out.runSteps(Out.objects(spec, "steps"), 0, Map.of(
            "produce", driver::produce,
            "transaction", driver::transaction,
            "simple", driver::simple,
            "push", driver::push,
            "lite_push", driver::litePush,
            "lite_exclusive", driver::liteExclusive,
            "load", driver::load));
    }

    // ---- producing ---------------------------------------------------------------------
    private Message message(String topic, JsonObject m) {
        MessageBuilder builder = provider.newMessageBuilder()
            .setTopic(topic)
            .setBody(Out.bytes(Out.str(m, "body", "")));
        String tag = Out.str(m, "tag", null);
        if (tag != null) {
            builder.setTag(tag);
        }
        List<String> keys = Out.strings(m, "keys");
        if (!keys.isEmpty()) {
            builder.setKeys(keys.toArray(new String[0]));
        }
        String group = Out.str(m, "group", null);
        if (group != null) {
            builder.setMessageGroup(group);
        }
        long delay = Out.num(m, "delay_ms", -1);
        if (delay >= 0) {
            builder.setDeliveryTimestamp(System.currentTimeMillis() + delay);
        }
        String liteTopic = Out.str(m, "lite_topic", null);
        if (liteTopic != null) {
            builder.setLiteTopic(liteTopic);
        }
        long priority = Out.num(m, "priority", -1);
        if (priority >= 0) {
            builder.setPriority((int) priority);
        }
        for (Map.Entry<String, String> p : Out.stringMap(m, "properties").entrySet()) {
            builder.addProperty(p.getKey(), p.getValue());
        }
        return builder.build();
    }

    private static void sent(String body, SendReceipt receipt, boolean async) {
        Object queue = null;
        Object offset = null;
        Object transactionId = null;
        if (receipt instanceof SendReceiptImpl) {
            SendReceiptImpl impl = (SendReceiptImpl) receipt;
            queue = impl.getMessageQueue().getQueueId();
            offset = impl.getOffset();
            transactionId = impl.getTransactionId();
        }
        Out.emit("sent", "body", body, "id", receipt.getMessageId().toString(), "queue", queue,
            "offset", offset, "transaction_id", transactionId, "async", async,
            "recall_handle", receipt.getRecallHandle());
    }

    /** Recalls a delayed message (RocketMQ 5.3.2's RecallMessage): recalled or recall_failed. */
    private static void recall(Producer producer, String topic, String body, String handle) {
        try {
            RecallReceipt receipt = producer.recallMessage(topic, handle);
            Out.emit("recalled", "body", body, "id", receipt.getMessageId().toString());
        } catch (Exception e) {
            Out.failed("recall_failed", e, "body", body);
        }
    }

    private Producer producer(List<String> topics, TransactionCheckerHolder checker) throws Exception {
        ProducerBuilder builder = provider.newProducerBuilder()
            .setClientConfiguration(configuration)
            .setTopics(topics.toArray(new String[0]));
        if (checker != null) {
            builder.setTransactionChecker(checker::check);
        }
        return builder.build();
    }

    private void produce(JsonObject step) throws Exception {
        List<JsonObject> messages = Out.objects(step, "messages");
        List<String> topics = Out.strings(step, "topics");
        if (topics.isEmpty()) {
            Set<String> seen = new HashSet<>();
            for (JsonObject m : messages) {
                if (seen.add(Out.str(m, "topic", ""))) {
                    topics.add(Out.str(m, "topic", ""));
                }
            }
        }
        try (Producer producer = producer(topics, null)) {
            Map<String, CompletableFuture<SendReceipt>> pending = new LinkedHashMap<>();
            for (JsonObject m : messages) {
                String body = Out.str(m, "body", "");
                Message message = message(Out.str(m, "topic", ""), m);
                if (Out.bool(m, "async", false)) {
                    pending.put(body, producer.sendAsync(message));
                    continue;
                }
                SendReceipt receipt;
                try {
                    receipt = producer.send(message);
                } catch (Exception e) {
                    Out.failed("send_failed", e, "body", body);
                    continue;
                }
                sent(body, receipt, false);
                for (long i = Out.num(m, "recall", 0); i > 0; i--) {
                    recall(producer, Out.str(m, "topic", ""), body, receipt.getRecallHandle());
                }
            }
            for (JsonObject r : Out.objects(step, "recall_handles")) {  // from earlier runs
                recall(producer, Out.str(r, "topic", ""), Out.str(r, "body", ""),
                    Out.str(r, "handle", ""));
            }
            for (Map.Entry<String, CompletableFuture<SendReceipt>> p : pending.entrySet()) {
                try {
                    sent(p.getKey(), p.getValue().get(30, TimeUnit.SECONDS), true);
                } catch (Exception e) {
                    Out.failed("send_failed", e, "body", p.getKey());
                }
            }
        }
    }

    /** The orphan check: answers what the spec says and records each question. */
    private static final class TransactionCheckerHolder {
        private final TransactionResolution answer;
        private final AtomicInteger checks = new AtomicInteger();

        TransactionCheckerHolder(TransactionResolution answer) {
            this.answer = answer;
        }

        TransactionResolution check(MessageView view) {
            checks.incrementAndGet();
            Out.emit("checked", "body", Out.utf8(bytesOf(view.getBody())),
                "id", view.getMessageId().toString(), "answer", answer.name());
            return answer;
        }
    }

    private void transaction(JsonObject step) throws Exception {
        String topic = Out.str(step, "topic", "");
        TransactionCheckerHolder checker = new TransactionCheckerHolder(
            TransactionResolution.valueOf(Out.str(step, "checker", "COMMIT")));
        try (Producer producer = producer(Collections.singletonList(topic), checker)) {
            for (JsonObject m : Out.objects(step, "messages")) {
                String body = Out.str(m, "body", "");
                Transaction transaction = producer.beginTransaction();
                SendReceipt receipt;
                try {
                    receipt = producer.send(message(topic, m), transaction);
                } catch (Exception e) {
                    Out.failed("send_failed", e, "body", body);
                    continue;
                }
                sent(body, receipt, false);
                String end = Out.str(m, "end", "commit");
                try {
                    if (end.equals("commit")) {
                        transaction.commit();
                        Out.emit("committed", "body", body, "id", receipt.getMessageId().toString());
                    } else if (end.equals("rollback")) {
                        transaction.rollback();
                        Out.emit("rolled_back", "body", body, "id", receipt.getMessageId().toString());
                    }
                } catch (Exception e) {
                    Out.failed("end_failed", e, "body", body, "end", end);
                }
            }
            long deadline = System.nanoTime() + (long) (Out.real(step, "wait_for_check_s", 0) * 1e9);
            long wanted = Out.num(step, "checks", 0);
            while (checker.checks.get() < wanted && System.nanoTime() < deadline) {
                Out.sleepMillis(100);
            }
            Out.sleepMillis((long) (Out.checkAnswerLingerS(step) * 1000));
        }
    }

    // ---- consuming ---------------------------------------------------------------------
    private static byte[] bytesOf(ByteBuffer buffer) {
        ByteBuffer copy = buffer.duplicate();
        byte[] out = new byte[copy.remaining()];
        copy.get(out);
        return out;
    }

    private static Object[] describe(MessageView view) {
        return new Object[] {
            "id", view.getMessageId().toString(),
            "topic", view.getTopic(),
            "body", Out.utf8(bytesOf(view.getBody())),
            "tag", view.getTag().orElse(null),
            "keys", new ArrayList<>(view.getKeys()),
            "properties", new LinkedHashMap<>(view.getProperties()),
            "group", view.getMessageGroup().orElse(null),
            "delivery_timestamp", view.getDeliveryTimestamp().orElse(null),
            "priority", view.getPriority().orElse(null),
            "lite_topic", view.getLiteTopic().orElse(null),
            "attempt", view.getDeliveryAttempt(),
            "born_host", view.getBornHost(),
            "born_timestamp", view.getBornTimestamp(),
            "received_at", System.currentTimeMillis(),
        };
    }

    private static Object[] with(Object[] first, Object... more) {
        Object[] all = new Object[first.length + more.length];
        System.arraycopy(first, 0, all, 0, first.length);
        System.arraycopy(more, 0, all, first.length, more.length);
        return all;
    }

    private static Map<String, FilterExpression> subscription(JsonObject step) {
        String expression = Out.str(step, "expression", "*");
        FilterExpressionType type = Out.bool(step, "sql", false)
            ? FilterExpressionType.SQL92 : FilterExpressionType.TAG;
        return Collections.singletonMap(Out.str(step, "topic", ""), new FilterExpression(expression, type));
    }

    private void simple(JsonObject step) throws Exception {
        Map<String, MessageView> latest = new ConcurrentHashMap<>();
        try (SimpleConsumer consumer = provider.newSimpleConsumerBuilder()
            .setClientConfiguration(configuration)
            .setConsumerGroup(Out.str(step, "group", ""))
            .setAwaitDuration(Duration.ofMillis((long) (Out.real(step, "await_s", 2) * 1000)))
            .setSubscriptionExpressions(subscription(step))
            .build()) {
            for (JsonObject op : Out.objects(step, "ops")) {
                switch (Out.str(op, "op", "")) {
                    case "receive":
                        receive(consumer, op, latest);
                        break;
                    case "ack":
                        for (String body : Out.strings(op, "bodies")) {
                            ack(consumer, latest.get(body), body);
                        }
                        break;
                    case "change":
                        change(consumer, op, latest);
                        break;
                    case "sleep":
                        Out.sleepMillis((long) (Out.real(op, "s", 0) * 1000));
                        break;
                    default:
                        throw new IllegalArgumentException("unknown op " + op);
                }
            }
        }
    }

    private static void receive(SimpleConsumer consumer, JsonObject op, Map<String, MessageView> latest) {
        long wanted = Out.num(op, "count", 1);
        int max = (int) Out.num(op, "max", 16);
        Duration invisible = Duration.ofMillis((long) (Out.real(op, "invisible_s", 30) * 1000));
        boolean ack = Out.bool(op, "ack", false);
        long deadline = System.nanoTime() + (long) (Out.real(op, "deadline_s", 20) * 1e9);
        long got = 0;
        while (got < wanted && System.nanoTime() < deadline) {
            List<MessageView> views;
            try {
                views = consumer.receive(max, invisible);
            } catch (Exception e) {
                Out.failed("receive_failed", e);
                Out.sleepMillis(200);
                continue;
            }
            for (MessageView view : views) {
                got++;
                String body = Out.utf8(bytesOf(view.getBody()));
                latest.put(body, view);
                Out.emit("received", describe(view));
                if (ack) {
                    ack(consumer, view, body);
                }
            }
        }
    }

    private static void ack(SimpleConsumer consumer, MessageView view, String body) {
        if (view == null) {
            Out.emit("ack_failed", "body", body, "type", "NotReceived", "message", "never received");
            return;
        }
        try {
            consumer.ack(view);
            Out.emit("acked", "body", body, "id", view.getMessageId().toString());
        } catch (Exception e) {
            Out.failed("ack_failed", e, "body", body, "id", view.getMessageId().toString());
        }
    }

    private static void change(SimpleConsumer consumer, JsonObject op, Map<String, MessageView> latest) {
        String body = Out.str(op, "body", "");
        MessageView view = latest.get(body);
        Duration invisible = Duration.ofMillis((long) (Out.real(op, "invisible_s", 30) * 1000));
        try {
            consumer.changeInvisibleDuration(view, invisible);
            Out.emit("changed", "body", body, "id", view.getMessageId().toString());
        } catch (Exception e) {
            Out.failed("change_failed", e, "body", body);
        }
    }

    /** One push consumer of a "push" step, and what its listener saw. */
    private final class Pushed {
        final JsonObject spec;
        final Set<String> fail;
        final Set<String> expect;
        final long failAttempts;
        final Set<String> succeeded = ConcurrentHashMap.newKeySet();
        final Map<String, AtomicInteger> failures = new ConcurrentHashMap<>();
        final PushConsumer consumer;

        Pushed(JsonObject spec) throws Exception {
            this.spec = spec;
            this.fail = new HashSet<>(Out.strings(spec, "fail"));
            this.expect = new HashSet<>(Out.strings(spec, "expect"));
            this.failAttempts = Out.num(spec, "fail_attempts", 1);
            this.consumer = provider.newPushConsumerBuilder()
                .setClientConfiguration(configuration)
                .setConsumerGroup(Out.str(spec, "group", ""))
                .setSubscriptionExpressions(subscription(spec))
                .setConsumptionThreadCount((int) Out.num(spec, "threads", 4))
                .setMessageListener(view -> {
                    String body = Out.utf8(bytesOf(view.getBody()));
                    boolean failed = fail.contains(body);
                    Out.emit("consumed", with(describe(view), "failed", failed, "consumer_group",
                        Out.str(spec, "group", "")));
                    if (failed) {
                        failures.computeIfAbsent(body, b -> new AtomicInteger()).incrementAndGet();
                        return ConsumeResult.FAILURE;
                    }
                    succeeded.add(body);
                    return ConsumeResult.SUCCESS;
                })
                .build();
        }

        boolean done() {
            boolean all = succeeded.containsAll(expect);
            for (String body : fail) {
                AtomicInteger seen = failures.get(body);
                all &= seen != null && seen.get() >= failAttempts;
            }
            return all;
        }
    }

    /**
     * Push consumers, all at once: the step's own fields make one, "consumers": [..] several.
     * They are closed together, since a push consumer's close waits for its receive long
     * polls to end (the server's long-polling timeout).
     */
    private void push(JsonObject step) throws Exception {
        List<JsonObject> specs = Out.objects(step, "consumers");
        if (specs.isEmpty()) {
            specs.add(step);
        }
        List<Pushed> pushed = new ArrayList<>();
        try {
            for (JsonObject spec : specs) {
                pushed.add(new Pushed(spec));
            }
            long deadline = System.nanoTime() + (long) (Out.real(step, "deadline_s", 30) * 1e9);
            boolean all = false;
            while (!all && System.nanoTime() < deadline) {
                all = pushed.stream().allMatch(Pushed::done);
                if (!all) {
                    Out.sleepMillis(100);
                }
            }
            for (Pushed p : pushed) {
                Out.emit("push_waited", "group", Out.str(p.spec, "group", ""), "all_seen", p.done());
            }
            Out.sleepMillis((long) (Out.real(step, "linger_s", 0) * 1000));
        } finally {
            List<Thread> closing = new ArrayList<>();
            for (Pushed p : pushed) {
                Thread t = new Thread(() -> {
                    try {
                        p.consumer.close();
                    } catch (Exception e) {
                        Out.failed("close_failed", e, "group", Out.str(p.spec, "group", ""));
                    }
                });
                t.start();
                closing.add(t);
            }
            for (Thread t : closing) {
                t.join();
            }
        }
    }

    /**
     * A LitePushConsumer bound to "topic": subscribes to each of "lite_topics" (those also in
     * "from_end" with OffsetOption.MAX_OFFSET: past what is stored), consumes until it has
     * seen every body of "expect" or "deadline_s" passes. A refused subscription is an event.
     */
    private void litePush(JsonObject step) throws Exception {
        Set<String> seen = ConcurrentHashMap.newKeySet();
        Set<String> expect = new HashSet<>(Out.strings(step, "expect"));
        try (LitePushConsumer consumer = provider.newLitePushConsumerBuilder()
            .setClientConfiguration(configuration)
            .setConsumerGroup(Out.str(step, "group", ""))
            .bindTopic(Out.str(step, "topic", ""))
            .setConsumptionThreadCount(4)
            .setMessageListener(view -> {
                Out.emit("consumed", describe(view));
                seen.add(Out.utf8(bytesOf(view.getBody())));
                return ConsumeResult.SUCCESS;
            })
            .build()) {
            Set<String> fromEnd = new HashSet<>(Out.strings(step, "from_end"));
            for (String name : Out.strings(step, "lite_topics")) {
                try {
                    if (fromEnd.contains(name)) {
                        consumer.subscribeLite(name, OffsetOption.MAX_OFFSET);
                    } else {
                        consumer.subscribeLite(name);
                    }
                    Out.emit("subscribed", "name", name);
                } catch (Exception e) {
                    Out.failed("subscribe_failed", e, "name", name);
                }
            }
            long deadline = System.nanoTime() + (long) (Out.real(step, "deadline_s", 30) * 1e9);
            while (!seen.containsAll(expect) && System.nanoTime() < deadline) {
                Out.sleepMillis(100);
            }
            Out.emit("seen", "bodies", new ArrayList<>(new java.util.TreeSet<>(seen)));
        }
    }

    private LitePushConsumer litePushConsumer(JsonObject step, String instance) throws Exception {
        return provider.newLitePushConsumerBuilder()
            .setClientConfiguration(configuration)
            .setConsumerGroup(Out.str(step, "group", ""))
            .bindTopic(Out.str(step, "topic", ""))
            .setConsumptionThreadCount(1)
            .setMessageListener(view -> {
                Object[] described = describe(view);
                Object[] event = java.util.Arrays.copyOf(described, described.length + 2);
                event[described.length] = "instance";
                event[described.length + 1] = instance;
                Out.emit("consumed", event);
                liteConsumed.add(Out.utf8(bytesOf(view.getBody())));
                return ConsumeResult.SUCCESS;
            })
            .build();
    }

    /**
     * Two LitePushConsumers "a" and "b" of one group subscribe, in turn, to "lite_topic";
     * then "messages" bodies are sent to it. Events: "sets" (each consumer's lite topics once
     * "a" no longer has it, or after "notice_s"), "consumed" with the consumer's instance,
     * "seen" (bodies) after every body was consumed or "deadline_s".
     */
    private void liteExclusive(JsonObject step) throws Exception {
        String topic = Out.str(step, "topic", "");
        String liteTopic = Out.str(step, "lite_topic", "");
        try (LitePushConsumer a = litePushConsumer(step, "a");
             LitePushConsumer b = litePushConsumer(step, "b")) {
            a.subscribeLite(liteTopic);
            b.subscribeLite(liteTopic);
            long noticeBy = System.nanoTime() + (long) (Out.real(step, "notice_s", 10) * 1e9);
            while (a.getLiteTopicSet().contains(liteTopic) && System.nanoTime() < noticeBy) {
                Out.sleepMillis(50);
            }
            Out.emit("sets", "a", new ArrayList<>(a.getLiteTopicSet()),
                "b", new ArrayList<>(b.getLiteTopicSet()));
            List<String> bodies = Out.strings(step, "messages");
            try (Producer producer = producer(Collections.singletonList(topic), null)) {
                for (String body : bodies) {
                    producer.send(provider.newMessageBuilder().setTopic(topic)
                        .setBody(Out.bytes(body)).setLiteTopic(liteTopic).build());
                }
            }
            long deadline = System.nanoTime() + (long) (Out.real(step, "deadline_s", 30) * 1e9);
            while (System.nanoTime() < deadline && !consumedAll(bodies)) {
                Out.sleepMillis(100);
            }
            Out.sleepMillis((long) (Out.real(step, "linger_s", 2) * 1000));
        }
    }

    private final Set<String> liteConsumed = ConcurrentHashMap.newKeySet();

    private boolean consumedAll(List<String> bodies) {
        return liteConsumed.containsAll(bodies);
    }

    // ---- a failover drill's load -------------------------------------------------------
    private static double monotonic() {
        return System.nanoTime() / 1e9;
    }

    private void load(JsonObject step) throws Exception {
        String topic = Out.str(step, "topic", "");
        java.io.File stopFile = new java.io.File(Out.str(step, "stop_file", ""));
        Duration invisible = Duration.ofMillis((long) (Out.real(step, "invisible_s", 5) * 1000));
        long drainNanos = (long) (Out.real(step, "drain_s", 300) * 1e9);
        long idleNanos = (long) (Out.real(step, "drain_idle_s", 15) * 1e9);
        long pauseMillis = Out.num(step, "pause_ms", 0);
        java.util.concurrent.atomic.AtomicLong lastNew = new java.util.concurrent.atomic.AtomicLong(System.nanoTime());
        Set<String> acked = ConcurrentHashMap.newKeySet();
        Set<String> received = ConcurrentHashMap.newKeySet();
        java.util.concurrent.atomic.AtomicBoolean stop = new java.util.concurrent.atomic.AtomicBoolean();
        java.util.concurrent.atomic.AtomicLong drainUntil = new java.util.concurrent.atomic.AtomicLong(Long.MAX_VALUE);
        try (Producer producer = producer(Collections.singletonList(topic), null);
             SimpleConsumer consumer = provider.newSimpleConsumerBuilder()
                 .setClientConfiguration(configuration)
                 .setConsumerGroup(Out.str(step, "group", ""))
                 .setAwaitDuration(Duration.ofMillis((long) (Out.real(step, "await_s", 2) * 1000)))
                 .setSubscriptionExpressions(subscription(step))
                 .build()) {
            Thread producing = new Thread(() -> {
                for (long i = 0; !stop.get(); i++) {
                    String body = "j-" + i;
                    double t0 = monotonic();
                    try {
                        producer.send(provider.newMessageBuilder().setTopic(topic)
                            .setBody(Out.bytes(body)).build());
                        acked.add(body);
                        Out.emit("sent", "body", body, "t0", t0, "t1", monotonic());
                    } catch (Throwable e) {
                        Out.failed("send_failed", e, "body", body, "t0", t0, "t1", monotonic());
                    }
                    if (pauseMillis > 0) {
                        Out.sleepMillis(pauseMillis);
                    }
                }
            });
            Thread consuming = new Thread(() -> {
                while (!(stop.get() && (received.containsAll(acked) || System.nanoTime() > drainUntil.get()
                    || System.nanoTime() - lastNew.get() > idleNanos))) {
                    List<MessageView> views;
                    try {
                        views = consumer.receive(16, invisible);
                    } catch (Throwable e) {
                        Out.failed("receive_failed", e, "t", monotonic());
                        Out.sleepMillis(50);
                        continue;
                    }
                    for (MessageView view : views) {
                        String body = Out.utf8(bytesOf(view.getBody()));
                        if (received.add(body)) {
                            lastNew.set(System.nanoTime());
                        }
                        Out.emit("received", "body", body, "t", monotonic(), "attempt", view.getDeliveryAttempt());
                        try {
                            consumer.ack(view);
                        } catch (Throwable e) {
                            Out.failed("ack_failed", e, "body", body, "t", monotonic());
                        }
                    }
                }
            });
            producing.start();
            consuming.start();
            Out.emit("ready", "t", monotonic());
            while (!stopFile.exists()) {
                Out.sleepMillis(20);
            }
            drainUntil.set(System.nanoTime() + drainNanos);
            stop.set(true);
            producing.join();
            consuming.join();
        }
    }
}

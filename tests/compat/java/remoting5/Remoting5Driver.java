import com.google.gson.JsonObject;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Base64;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

/**
 * Drives the newest official remoting client (rocketmq-client 5.x, the 4.x protocol) through
 * what RocketMQ 5.3.2 and 5.4 added to it: a message due at a time (setDeliverTimeMs) whose
 * send answers a recall handle, DefaultMQProducer.recallMessage, and Message.setPriority.
 * The rest of the 4.x matrix is Remoting4Driver's, on rocketmq-client 4.9.8.
 *
 * <pre>
 * {"namesrv": "host:port;host:port",
 *  "steps": [
 *   {"do": "produce", "group", "messages": [{"topic", "body", "keys": [..],
 *        "priority": n, "deliver_in_ms": n (setDeliverTimeMs(now + n))}]},
 *   {"do": "recall", "group", "topic", "body" (a body sent before: its send's handle)
 *        | "handle" (any text), "unsigned": bool (the body's handle without ferrymq's MAC)},
 *   {"do": "pull", "group", "topic", "expect": [bodies], "deadline_s", "linger_s"},
 *   {"do": "push", "group", "topic", "expect": [bodies], "deadline_s"}]}
 * </pre>
 *
 * Events: sent (body, id, queue, broker, recall_handle, at_ms), send_failed, recalled (body, id),
 * recall_failed, pulled / consumed (body, id, queue, priority, at_ms), pull_waited /
 * push_waited (all_seen), step_failed, done.
 */
public final class Remoting5Driver {
    private final String namesrv;
    private final Map<String, String> handles = new HashMap<>();
    private int instances;

    private Remoting5Driver(String namesrv) {
        this.namesrv = namesrv;
    }

    public static void main(String[] args) {
        JsonObject spec = Out.readSpec(args);
        Remoting5Driver driver = new Remoting5Driver(Out.str(spec, "namesrv", ""));
        Out.runSteps(Out.objects(spec, "steps"), 0, Map.of(
            "produce", driver::produce,
            "recall", driver::recall,
            "pull", driver::pull,
            "push", driver::push));
    }

    private String instance(String role) {
        return "driver5-" + role + "-" + (instances++) + "-" + ProcessHandle.current().pid();
    }

    private DefaultMQProducer producer(String group) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer(group);
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName(instance("producer"));
        producer.setSendMsgTimeout(15000);
        producer.start();
        return producer;
    }

    private void produce(JsonObject step) throws Exception {
        DefaultMQProducer producer = producer(Out.str(step, "group", "driver5-producer"));
        try {
            for (JsonObject m : Out.objects(step, "messages")) {
                String body = Out.str(m, "body", "");
                Message message = new Message(Out.str(m, "topic", ""), Out.bytes(body));
                List<String> keys = Out.strings(m, "keys");
                if (!keys.isEmpty()) {
                    message.setKeys(keys);
                }
                long priority = Out.num(m, "priority", -1);
                if (priority >= 0) {
                    message.setPriority((int) priority);
                }
                long deliverInMs = Out.num(m, "deliver_in_ms", 0);
                long atMs = System.currentTimeMillis();
                if (deliverInMs > 0) {
                    message.setDeliverTimeMs(atMs + deliverInMs);
                }
                try {
                    SendResult result = producer.send(message);
                    MessageQueue queue = result.getMessageQueue();
                    if (result.getRecallHandle() != null) {
                        handles.put(body, result.getRecallHandle());
                    }
                    Out.emit("sent", "body", body, "id", result.getMsgId(),
                        "status", result.getSendStatus().name(),
                        "queue", queue == null ? null : queue.getQueueId(),
                        "broker", queue == null ? null : queue.getBrokerName(),
                        "recall_handle", result.getRecallHandle(), "at_ms", atMs);
                } catch (Exception e) {
                    Out.failed("send_failed", e, "body", body);
                }
            }
        } finally {
            producer.shutdown();
        }
    }

    private void recall(JsonObject step) throws Exception {
        DefaultMQProducer producer = producer(Out.str(step, "group", "driver5-producer"));
        String body = Out.str(step, "body", null);
        String handle = body != null ? handles.get(body) : Out.str(step, "handle", "");
        if (handle != null && Out.bool(step, "unsigned", false)) {
            handle = unsigned(handle);
        }
        try {
            String id = producer.recallMessage(Out.str(step, "topic", ""), handle);
            Out.emit("recalled", "body", body, "id", id);
        } catch (Exception e) {
            Out.failed("recall_failed", e, "body", body);
        } finally {
            producer.shutdown();
        }
    }

    /**
     * The handle as Apache RocketMQ writes one ("v1 topic broker ms id", URL-safe base64):
     * ferrymq's without the sixth field, its MAC.
     */
    private static String unsigned(String handle) {
        String[] fields = new String(Base64.getUrlDecoder().decode(handle), StandardCharsets.UTF_8)
            .split(" ");
        String plain = String.join(" ", Arrays.copyOf(fields, Math.min(fields.length, 5)));
        return Base64.getUrlEncoder().encodeToString(plain.getBytes(StandardCharsets.UTF_8));
    }

    private void pull(JsonObject step) throws Exception {
        Set<String> expect = new HashSet<>(Out.strings(step, "expect"));
        DefaultLitePullConsumer consumer = new DefaultLitePullConsumer(Out.str(step, "group", ""));
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName(instance("pull"));
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setAutoCommit(true);
        consumer.subscribe(Out.str(step, "topic", ""), "*");
        consumer.start();
        Set<String> seen = new HashSet<>();
        try {
            long deadline = System.nanoTime() + (long) (Out.real(step, "deadline_s", 30) * 1e9);
            while (!seen.containsAll(expect) && System.nanoTime() < deadline) {
                pollOnce(consumer, seen);
            }
            // What must not come (a recalled message) is given linger_s more to show up.
            long lingerEnd = System.nanoTime() + (long) (Out.real(step, "linger_s", 0) * 1e9);
            while (System.nanoTime() < lingerEnd) {
                pollOnce(consumer, seen);
            }
            Out.emit("pull_waited", "all_seen", seen.containsAll(expect));
        } finally {
            consumer.shutdown();
        }
    }

    private void push(JsonObject step) throws Exception {
        Set<String> expect = new HashSet<>(Out.strings(step, "expect"));
        Set<String> seen = ConcurrentHashMap.newKeySet();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(Out.str(step, "group", ""));
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName(instance("push"));
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(Out.str(step, "topic", ""), "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            for (MessageExt m : messages) {
                String body = Out.utf8(m.getBody());
                seen.add(body);
                Out.emit("consumed", "body", body, "id", m.getMsgId(), "queue", m.getQueueId(),
                    "priority", m.getPriority(), "at_ms", System.currentTimeMillis());
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        try {
            long deadline = System.nanoTime() + (long) (Out.real(step, "deadline_s", 30) * 1e9);
            while (!seen.containsAll(expect) && System.nanoTime() < deadline) {
                Out.sleepMillis(50);
            }
            Out.emit("push_waited", "all_seen", seen.containsAll(expect));
        } finally {
            consumer.shutdown();
        }
    }

    private static void pollOnce(DefaultLitePullConsumer consumer, Set<String> seen) {
        for (MessageExt m : consumer.poll(500)) {
            String body = Out.utf8(m.getBody());
            seen.add(body);
            Out.emit("pulled", "body", body, "id", m.getMsgId(), "queue", m.getQueueId(),
                "priority", m.getPriority(), "at_ms", System.currentTimeMillis());
        }
    }
}

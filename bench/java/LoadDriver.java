import com.google.gson.JsonObject;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicLongArray;
import java.util.concurrent.locks.LockSupport;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * An open-loop load of the official Java 4.x client, as the OpenMessaging Benchmark's
 * RocketMQ driver offers it: one DefaultMQProducer sending 1 KiB messages asynchronously at
 * a fixed rate (paced by the clock, never by the answers), one DefaultMQPushConsumer
 * reading them. Prints one JSON line per step and rate:
 *
 * <pre>
 * spec: {"namesrv", "topic", "group", "size": bytes,
 *        "steps": [{"rate": msgs/s, "seconds": s}], "drain_s": s (after the last step)}
 * events: {"event": "step", "rate", "seconds", "sent", "acked", "errors": {kind: n},
 *          "error_samples": {kind: message}, "publish_ms": {"p50", "p99", "max"},
 *          "received", "end_to_end_ms": {"p50", "p99", "max"}, "backlog"}
 *         {"event": "drained", "received", "backlog"}, {"event": "done"}
 * </pre>
 *
 * A send's latency runs from the moment the pacing allowed it to its callback, so a
 * producer that falls behind its schedule shows it. End to end runs from the message's
 * born timestamp (the producer's clock, the same host) to the consumer's listener.
 * Error kinds: the broker's response code ("broker:2" is SYSTEM_BUSY), a send status other
 * than SEND_OK ("status:FLUSH_SLAVE_TIMEOUT"), else the exception's class.
 */
public final class LoadDriver {
    private static final long[] BOUNDS_US = latencyBounds();

    /** A latency histogram with fixed buckets, safe to record from any thread. */
    static final class Histogram {
        final AtomicLongArray counts = new AtomicLongArray(BOUNDS_US.length + 1);
        final AtomicLong max = new AtomicLong();

        void record(long micros) {
            int i = Arrays.binarySearch(BOUNDS_US, micros);
            counts.incrementAndGet(i >= 0 ? i : -i - 1);
            max.accumulateAndGet(micros, Math::max);
        }

        Map<String, Double> summary() {
            long total = 0;
            for (int i = 0; i < counts.length(); i++) {
                total += counts.get(i);
            }
            Map<String, Double> out = new TreeMap<>();
            out.put("p50", quantile(total, 0.50));
            out.put("p99", quantile(total, 0.99));
            out.put("max", max.get() / 1000.0);
            return out;
        }

        private double quantile(long total, double q) {
            if (total == 0) {
                return 0.0;
            }
            long rank = (long) Math.ceil(q * total);
            long seen = 0;
            for (int i = 0; i < counts.length(); i++) {
                seen += counts.get(i);
                if (seen >= rank) {
                    long bound = i < BOUNDS_US.length ? BOUNDS_US[i] : max.get();
                    return bound / 1000.0;
                }
            }
            return max.get() / 1000.0;
        }
    }

    /** 50 µs .. 120 s, about 5 % apart: percentiles within 5 %. */
    private static long[] latencyBounds() {
        List<Long> bounds = new ArrayList<>();
        for (double b = 50; b <= 120_000_000; b *= 1.05) {
            long rounded = Math.round(b);
            if (bounds.isEmpty() || bounds.get(bounds.size() - 1) < rounded) {
                bounds.add(rounded);
            }
        }
        return bounds.stream().mapToLong(Long::longValue).toArray();
    }

    /** What one step counts; replaced at each step's start. */
    static final class Step {
        final AtomicLong acked = new AtomicLong();
        final Map<String, AtomicLong> errors = new ConcurrentHashMap<>();
        final Map<String, String> samples = new ConcurrentHashMap<>();
        final Histogram publish = new Histogram();
        final Histogram endToEnd = new Histogram();
        final AtomicLong received = new AtomicLong();

        void failed(Throwable error) {
            String kind = error.getClass().getSimpleName();
            Throwable cause = error;
            while (cause != null) {
                if (cause instanceof MQBrokerException) {
                    kind = "broker:" + ((MQBrokerException) cause).getResponseCode();
                    break;
                }
                cause = cause.getCause();
            }
            count(kind, String.valueOf(error.getMessage()));
        }

        void count(String kind, String sample) {
            errors.computeIfAbsent(kind, k -> new AtomicLong()).incrementAndGet();
            samples.putIfAbsent(kind, sample);
        }
    }

    private static volatile Step current = new Step();
    private static final AtomicLong TOTAL_SENT = new AtomicLong();
    private static final AtomicLong TOTAL_RECEIVED = new AtomicLong();

    public static void main(String[] args) throws Exception {
        JsonObject spec = Out.readSpec(args);
        String namesrv = Out.str(spec, "namesrv", "");
        String topic = Out.str(spec, "topic", "load");
        String group = Out.str(spec, "group", "load");
        int size = (int) Out.num(spec, "size", 1024);

        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group + "-consumer");
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("load-consumer-" + ProcessHandle.current().pid());
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            long now = System.currentTimeMillis();
            Step step = current;
            for (MessageExt m : messages) {
                step.endToEnd.record(Math.max(0, now - m.getBornTimestamp()) * 1000);
                step.received.incrementAndGet();
                TOTAL_RECEIVED.incrementAndGet();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();

        DefaultMQProducer producer = new DefaultMQProducer(group + "-producer");
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName("load-producer-" + ProcessHandle.current().pid());
        producer.start();

        byte[] body = new byte[size];
        Arrays.fill(body, (byte) 'x');
        for (JsonObject step : Out.objects(spec, "steps")) {
            runStep(producer, topic, body, Out.real(step, "rate", 1000), Out.real(step, "seconds", 10));
        }
        long drainUntil = System.nanoTime() + (long) (Out.real(spec, "drain_s", 10) * 1e9);
        while (System.nanoTime() < drainUntil && TOTAL_RECEIVED.get() < TOTAL_SENT.get()) {
            Out.sleepMillis(50);
        }
        Out.emit("drained", "received", TOTAL_RECEIVED.get(),
            "backlog", TOTAL_SENT.get() - TOTAL_RECEIVED.get());
        producer.shutdown();
        consumer.shutdown();
        Out.emit("done");
        System.exit(0);
    }

    private static void runStep(DefaultMQProducer producer, String topic, byte[] body, double rate,
            double seconds) {
        Step step = new Step();
        current = step;
        long count = (long) (rate * seconds);
        long start = System.nanoTime();
        double intervalNs = 1e9 / rate;
        for (long i = 0; i < count; i++) {
            long due = start + (long) (i * intervalNs);
            long wait = due - System.nanoTime();
            if (wait > 0) {
                LockSupport.parkNanos(wait);
            }
            final long sentAt = due;
            Message message = new Message(topic, body);
            TOTAL_SENT.incrementAndGet();
            try {
                producer.send(message, new SendCallback() {
                    @Override
                    public void onSuccess(SendResult result) {
                        if (result.getSendStatus() == SendStatus.SEND_OK) {
                            step.acked.incrementAndGet();
                        } else {
                            step.count("status:" + result.getSendStatus().name(), "written, not "
                                + "confirmed as the broker's mode asks");
                        }
                        step.publish.record((System.nanoTime() - sentAt) / 1000);
                    }

                    @Override
                    public void onException(Throwable error) {
                        step.failed(error);
                        step.publish.record((System.nanoTime() - sentAt) / 1000);
                    }
                });
            } catch (Exception error) {
                step.failed(error);
            }
        }
        // Answers still on their way count for this step: wait for them a little.
        long settle = System.nanoTime() + 3_000_000_000L;
        while (System.nanoTime() < settle && answered(step) < count) {
            Out.sleepMillis(20);
        }
        long elapsedMs = (System.nanoTime() - start) / 1_000_000;
        Map<String, Long> errors = new TreeMap<>();
        step.errors.forEach((k, v) -> errors.put(k, v.get()));
        Out.emit("step", "rate", rate, "seconds", seconds, "elapsed_ms", elapsedMs, "sent", count,
            "acked", step.acked.get(), "errors", errors, "error_samples", new TreeMap<>(step.samples),
            "publish_ms", step.publish.summary(), "received", step.received.get(),
            "end_to_end_ms", step.endToEnd.summary(),
            "backlog", TOTAL_SENT.get() - TOTAL_RECEIVED.get());
    }

    private static long answered(Step step) {
        long errors = 0;
        for (AtomicLong n : step.errors.values()) {
            errors += n.get();
        }
        return step.acked.get() + errors;
    }
}

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
 * arguments: NAMESRV TOPIC GROUP SIZE_BYTES DRAIN_S RATE:SECONDS[,RATE:SECONDS...]
 * events (one JSON object a line on stdout; the client's own logging goes to stderr):
 *   {"event": "step", "rate", "seconds", "elapsed_ms", "sent", "acked",
 *    "errors": {kind: n}, "error_samples": {kind: message},
 *    "publish_ms": {"p50", "p99", "max"}, "received", "end_to_end_ms": {...}, "backlog"}
 *   (backlog: acknowledged messages the consumer has not received yet)
 *   {"event": "drained", "received", "backlog"}, {"event": "done"}
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

        String json() {
            long total = 0;
            for (int i = 0; i < counts.length(); i++) {
                total += counts.get(i);
            }
            return "{\"p50\": " + quantile(total, 0.50) + ", \"p99\": " + quantile(total, 0.99)
                + ", \"max\": " + max.get() / 1000.0 + "}";
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
    private static final AtomicLong TOTAL_ACKED = new AtomicLong();
    private static final AtomicLong TOTAL_RECEIVED = new AtomicLong();

    private static final java.io.PrintStream EVENTS = System.out;

    public static void main(String[] args) throws Exception {
        System.setOut(System.err); // a library printing to stdout cannot garble an event
        String namesrv = args[0];
        String topic = args[1];
        String group = args[2];
        int size = Integer.parseInt(args[3]);
        double drainS = Double.parseDouble(args[4]);

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
        for (String step : args[5].split(",")) {
            String[] rateAndSeconds = step.split(":");
            runStep(producer, topic, body, Double.parseDouble(rateAndSeconds[0]),
                Double.parseDouble(rateAndSeconds[1]));
        }
        long drainUntil = System.nanoTime() + (long) (drainS * 1e9);
        while (System.nanoTime() < drainUntil && TOTAL_RECEIVED.get() < TOTAL_ACKED.get()) {
            Thread.sleep(50);
        }
        emit("{\"event\": \"drained\", \"received\": " + TOTAL_RECEIVED.get() + ", \"backlog\": "
            + Math.max(0, TOTAL_ACKED.get() - TOTAL_RECEIVED.get()) + "}");
        producer.shutdown();
        consumer.shutdown();
        emit("{\"event\": \"done\"}");
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
            try {
                producer.send(message, new SendCallback() {
                    @Override
                    public void onSuccess(SendResult result) {
                        if (result.getSendStatus() == SendStatus.SEND_OK) {
                            step.acked.incrementAndGet();
                            TOTAL_ACKED.incrementAndGet();
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
            LockSupport.parkNanos(20_000_000L);
        }
        long elapsedMs = (System.nanoTime() - start) / 1_000_000;
        StringBuilder errors = new StringBuilder();
        StringBuilder samples = new StringBuilder();
        for (Map.Entry<String, AtomicLong> e : new TreeMap<>(step.errors).entrySet()) {
            errors.append(errors.length() == 0 ? "" : ", ").append(quoted(e.getKey()))
                .append(": ").append(e.getValue().get());
            samples.append(samples.length() == 0 ? "" : ", ").append(quoted(e.getKey()))
                .append(": ").append(quoted(step.samples.getOrDefault(e.getKey(), "")));
        }
        emit("{\"event\": \"step\", \"rate\": " + rate + ", \"seconds\": " + seconds
            + ", \"elapsed_ms\": " + elapsedMs + ", \"sent\": " + count + ", \"acked\": "
            + step.acked.get() + ", \"errors\": {" + errors + "}, \"error_samples\": {" + samples
            + "}, \"publish_ms\": " + step.publish.json() + ", \"received\": "
            + step.received.get() + ", \"end_to_end_ms\": " + step.endToEnd.json()
            + ", \"backlog\": " + Math.max(0, TOTAL_ACKED.get() - TOTAL_RECEIVED.get()) + "}");
    }

    private static void emit(String line) {
        synchronized (EVENTS) {
            EVENTS.println(line);
            EVENTS.flush();
        }
    }

    /** A JSON string: quotes, backslashes and control characters escaped. */
    private static String quoted(String text) {
        StringBuilder out = new StringBuilder("\"");
        for (char c : text.toCharArray()) {
            if (c == '"' || c == '\\') {
                out.append('\\').append(c);
            } else if (c < 0x20) {
                out.append(String.format("\\u%04x", (int) c));
            } else {
                out.append(c);
            }
        }
        return out.append('"').toString();
    }

    private static long answered(Step step) {
        long errors = 0;
        for (AtomicLong n : step.errors.values()) {
            errors += n.get();
        }
        return step.acked.get() + errors;
    }
}

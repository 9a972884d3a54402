import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicLongArray;
import java.util.concurrent.locks.LockSupport;

/**
 * The open-loop load of bench.saturation, whatever the client: the steps' pacing (by the
 * clock, never by the answers), what each step counts, and the events it prints. A client's
 * driver (LoadDriver: RocketMQ's 4.x client; KafkaLoadDriver: Kafka's) starts its producer
 * and consumer, hands each paced send to {@link Sender}, reports each answer to the step it
 * was sent in and each message its consumer receives to {@link #received}, and calls
 * {@link #run}.
 *
 * <pre>
 * arguments after the driver's own three: SIZE_BYTES DRAIN_S RATE:SECONDS[,RATE:SECONDS...]
 * events (one JSON object a line on stdout; the client's own logging goes to stderr):
 *   {"event": "step", "rate", "seconds", "elapsed_ms", "sent", "acked",
 *    "errors": {kind: n}, "error_samples": {kind: message},
 *    "publish_ms": {"p50", "p99", "max"}, "received", "end_to_end_ms": {...}, "backlog"}
 *   (backlog: acknowledged messages the consumer has not received yet)
 *   {"event": "drained", "received", "backlog"}, {"event": "done"}
 * </pre>
 *
 * A send's latency runs from the moment the pacing allowed it to its answer, so a producer
 * that falls behind its schedule shows it. End to end runs from the message's own timestamp
 * (the producer's clock, the same host) to the consumer's receipt.
 */
public final class LoadSteps {
    private static final long[] BOUNDS_US = latencyBounds();
    private static final java.io.PrintStream EVENTS = System.out;
    private static final AtomicLong TOTAL_ACKED = new AtomicLong();
    private static final AtomicLong TOTAL_RECEIVED = new AtomicLong();
    // A step's counts and the totals change together and are read together (endStep): a
    // receipt counted between the reads of a step's figures and the totals, or after its
    // event but before the next step began, was in no step's event, and the steps' sum
    // came short of the totals (by 500 once, in the Kafka smoke run).
    private static final Object COUNTS = new Object();
    private static Step current = new Step();  // guarded by COUNTS

    private LoadSteps() {
    }

    /** Sends one message; its answer goes to {@code step} (acknowledged or failed). */
    public interface Sender {
        void send(byte[] body, long sentAtNs, Step step) throws Exception;
    }

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
    public static final class Step {
        final AtomicLong acked = new AtomicLong();
        final Map<String, AtomicLong> errors = new ConcurrentHashMap<>();
        final Map<String, String> samples = new ConcurrentHashMap<>();
        final Histogram publish = new Histogram();
        final Histogram endToEnd = new Histogram();
        final AtomicLong received = new AtomicLong();

        /** The send made at {@code sentAtNs} was acknowledged as the broker's mode asks. */
        public void acknowledged(long sentAtNs) {
            synchronized (COUNTS) {
                acked.incrementAndGet();
                TOTAL_ACKED.incrementAndGet();
            }
            answered(sentAtNs);
        }

        /** The send made at {@code sentAtNs} was answered with an error of {@code kind}. */
        public void failed(String kind, String sample, long sentAtNs) {
            count(kind, sample);
            answered(sentAtNs);
        }

        /** A send refused before it left (no answer to time): counted under {@code kind}. */
        public void refused(String kind, String sample) {
            count(kind, sample);
        }

        private void answered(long sentAtNs) {
            publish.record((System.nanoTime() - sentAtNs) / 1000);
        }

        void count(String kind, String sample) {
            errors.computeIfAbsent(kind, k -> new AtomicLong()).incrementAndGet();
            samples.putIfAbsent(kind, String.valueOf(sample));
        }
    }

    /** The consumer received a message stamped {@code bornMs} (epoch milliseconds). */
    public static void received(long bornMs) {
        long ageUs = Math.max(0, System.currentTimeMillis() - bornMs) * 1000;
        Step step;
        synchronized (COUNTS) {
            step = current;
            step.received.incrementAndGet();
            TOTAL_RECEIVED.incrementAndGet();
        }
        step.endToEnd.record(ageUs);
    }

    /** A step's event's counts, read with the totals at one moment. */
    static final class StepCounts {
        final long acked;
        final long received;
        final long backlog;  // acknowledged in every step so far, not received yet

        StepCounts(long acked, long received, long backlog) {
            this.acked = acked;
            this.received = received;
            this.backlog = backlog;
        }
    }

    /**
     * Ends {@code step} (the current one): its counts with the backlog, taken together, and
     * from now on a receipt counts in the next step. So the steps' received add up to the
     * total received, and with the last step's backlog to the total acknowledged.
     */
    static StepCounts endStep(Step step) {
        synchronized (COUNTS) {
            StepCounts counts = new StepCounts(step.acked.get(), step.received.get(),
                Math.max(0, TOTAL_ACKED.get() - TOTAL_RECEIVED.get()));
            current = new Step();
            return counts;
        }
    }

    /** Receipts counted so far, in every step. */
    static long totalReceived() {
        return TOTAL_RECEIVED.get();
    }

    /** The step receipts count in now: the next to run, once the last one ended. */
    static Step currentStep() {
        synchronized (COUNTS) {
            return current;
        }
    }

    /**
     * Runs the steps of {@code args} (SIZE_BYTES DRAIN_S STEPS, from {@code first}) through
     * {@code sender}, then waits up to DRAIN_S for the consumer to receive what was
     * acknowledged; prints a step event per step and the drained event.
     */
    public static void run(String[] args, int first, Sender sender) {
        int size = Integer.parseInt(args[first]);
        double drainS = Double.parseDouble(args[first + 1]);
        byte[] body = new byte[size];
        Arrays.fill(body, (byte) 'x');
        for (String step : args[first + 2].split(",")) {
            String[] rateAndSeconds = step.split(":");
            runStep(sender, body, Double.parseDouble(rateAndSeconds[0]),
                Double.parseDouble(rateAndSeconds[1]));
        }
        long drainUntil = System.nanoTime() + (long) (drainS * 1e9);
        while (System.nanoTime() < drainUntil && TOTAL_RECEIVED.get() < TOTAL_ACKED.get()) {
            LockSupport.parkNanos(50_000_000L);
        }
        long received;
        long backlog;
        synchronized (COUNTS) {
            received = TOTAL_RECEIVED.get();
            backlog = Math.max(0, TOTAL_ACKED.get() - received);
        }
        emit("{\"event\": \"drained\", \"received\": " + received + ", \"backlog\": "
            + backlog + "}");
    }

    /** The last event; ends the JVM (the clients' threads need not end on their own). */
    public static void done() {
        emit("{\"event\": \"done\"}");
        System.exit(0);
    }

    /** The client's own logging, and any library printing to stdout, goes to stderr. */
    public static void keepStdoutForEvents() {
        System.setOut(System.err);
    }

    private static void runStep(Sender sender, byte[] body, double rate, double seconds) {
        Step step = currentStep();  // made when the step before ended (endStep)
        long count = (long) (rate * seconds);
        long start = System.nanoTime();
        double intervalNs = 1e9 / rate;
        for (long i = 0; i < count; i++) {
            long due = start + (long) (i * intervalNs);
            long wait = due - System.nanoTime();
            if (wait > 0) {
                LockSupport.parkNanos(wait);
            }
            try {
                sender.send(body, due, step);
            } catch (Exception error) {
                step.refused(error.getClass().getSimpleName(), error.getMessage());
            }
        }
        // Answers still on their way count for this step: wait for them a little.
        long settle = System.nanoTime() + 3_000_000_000L;
        while (System.nanoTime() < settle && answered(step) < count) {
            LockSupport.parkNanos(20_000_000L);
        }
        long elapsedMs = (System.nanoTime() - start) / 1_000_000;
        StepCounts counts = endStep(step);
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
            + counts.acked + ", \"errors\": {" + errors + "}, \"error_samples\": {" + samples
            + "}, \"publish_ms\": " + step.publish.json() + ", \"received\": "
            + counts.received + ", \"end_to_end_ms\": " + step.endToEnd.json()
            + ", \"backlog\": " + counts.backlog + "}");
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

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.MessageListener;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.producer.Producer;

/**
 * The five workloads of bench.peers through the official Java 5.x client
 * (rocketmq-client-java, over gRPC) with its default settings (TLS included): Apache
 * RocketMQ's proxy and ferrymq's gRPC door through the same client.
 *
 * <pre>
 * arguments: ENDPOINTS WORKLOAD TOPIC GROUP COUNT [WINDOW]
 *   sequential_send   one synchronous send at a time          -> {"took": [seconds, ...]}
 *   windowed_send     WINDOW asynchronous sends outstanding   -> {"seconds": s}
 *                     (the client has no batch API: bench.peers' batched send is
 *                     BATCH * BATCHES_IN_FLIGHT outstanding, as for the Python client)
 *   end_to_end        send one, wait until the push consumer has it, repeat
 *                                                             -> {"took": [seconds, ...]}
 *   consume           COUNT stored first (2,048 outstanding, not timed), then read by a
 *                     new push consumer group                 -> {"seconds": s}
 * </pre>
 *
 * Every send must succeed; a failure ends the workload with exit status 1 and its reason on
 * stderr. The result is the last line of stdout.
 */
public final class PeerWorkloadsGrpc {
    static final int BODY_BYTES = 1024;
    static final int FILL_WINDOW = 128 * 16;
    static final int WARMUP = 50;
    static final long WAIT_S = 30;

    private static final java.io.PrintStream RESULT = System.out;
    private static final ClientServiceProvider PROVIDER = ClientServiceProvider.loadService();

    public static void main(String[] args) throws Exception {
        System.setOut(System.err); // a library printing to stdout cannot garble the result
        ClientConfiguration configuration = ClientConfiguration.newBuilder()
            .setEndpoints(args[0])
            .build();
        String workload = args[1];
        String topic = args[2];
        String group = args[3];
        int count = Integer.parseInt(args[4]);
        int window = args.length > 5 ? Integer.parseInt(args[5]) : 0;
        String result;
        try (Producer producer = PROVIDER.newProducerBuilder()
                .setClientConfiguration(configuration)
                .setTopics(topic)
                .build()) {
            switch (workload) {
                case "sequential_send":
                    result = took(sequentialSend(producer, topic, count));
                    break;
                case "windowed_send":
                    windowedSend(producer, topic, WARMUP, 8);
                    result = seconds(windowedSend(producer, topic, count, window));
                    break;
                case "end_to_end":
                    result = took(endToEnd(producer, configuration, topic, group, count));
                    break;
                case "consume":
                    windowedSend(producer, topic, count, FILL_WINDOW);
                    result = seconds(consume(configuration, topic, group, count));
                    break;
                default:
                    throw new IllegalArgumentException("no workload named " + workload);
            }
        } catch (Exception error) {
            System.err.println(workload + " failed: " + error);
            error.printStackTrace();
            System.exit(1);
            return;
        }
        RESULT.println(result);
        RESULT.flush();
        System.exit(0);
    }

    static Message message(String topic, byte[] body) {
        return PROVIDER.newMessageBuilder().setTopic(topic).setBody(body).build();
    }

    static byte[] plainBody() {
        byte[] body = new byte[BODY_BYTES];
        for (int i = 0; i < BODY_BYTES; i++) {
            body[i] = (byte) i;
        }
        return body;
    }

    /** A body whose first 8 bytes are the send's start and the next 8 its sequence. */
    static byte[] stampedBody(long sequence) {
        byte[] body = plainBody();
        ByteBuffer head = ByteBuffer.wrap(body).order(ByteOrder.LITTLE_ENDIAN);
        head.putLong(0, System.nanoTime());
        head.putLong(8, sequence);
        return body;
    }

    static List<Double> sequentialSend(Producer producer, String topic, int count)
            throws Exception {
        byte[] body = plainBody();
        for (int i = 0; i < WARMUP; i++) {
            producer.send(message(topic, body));
        }
        List<Double> took = new ArrayList<>(count);
        for (int i = 0; i < count; i++) {
            Message message = message(topic, body);
            long started = System.nanoTime();
            producer.send(message);
            took.add((System.nanoTime() - started) / 1e9);
        }
        return took;
    }

    static double windowedSend(Producer producer, String topic, int count, int window)
            throws Exception {
        byte[] body = plainBody();
        Semaphore outstanding = new Semaphore(window);
        CountDownLatch answered = new CountDownLatch(count);
        AtomicReference<Throwable> failure = new AtomicReference<>();
        long started = System.nanoTime();
        for (int i = 0; i < count && failure.get() == null; i++) {
            if (!outstanding.tryAcquire(WAIT_S, TimeUnit.SECONDS)) {
                throw new IllegalStateException("no answer within " + WAIT_S + " s");
            }
            producer.sendAsync(message(topic, body)).whenComplete((receipt, error) -> {
                if (error != null) {
                    failure.compareAndSet(null, error);
                }
                outstanding.release();
                answered.countDown();
            });
        }
        if (failure.get() == null && !answered.await(WAIT_S, TimeUnit.SECONDS)) {
            throw new IllegalStateException("answers missing after " + WAIT_S + " s");
        }
        if (failure.get() != null) {
            throw new IllegalStateException(String.valueOf(failure.get()));
        }
        return (System.nanoTime() - started) / 1e9;
    }

    static PushConsumer pushConsumer(ClientConfiguration configuration, String topic,
            String group, MessageListener listener) throws Exception {
        return PROVIDER.newPushConsumerBuilder()
            .setClientConfiguration(configuration)
            .setConsumerGroup(group)
            .setSubscriptionExpressions(Collections.singletonMap(topic, FilterExpression.SUB_ALL))
            .setMessageListener(listener)
            .build();
    }

    static List<Double> endToEnd(Producer producer, ClientConfiguration configuration,
            String topic, String group, int count) throws Exception {
        BlockingQueue<long[]> arrived = new ArrayBlockingQueue<>(1 << 16);
        // Never closed: a push consumer's close waits out its long polls (the server's
        // long-polling timeout, 30 s); the process ends once the result is out.
        pushConsumer(configuration, topic, group, view -> {
            long now = System.nanoTime();
            ByteBuffer head = view.getBody().duplicate().order(ByteOrder.LITTLE_ENDIAN);
            arrived.offer(new long[] {head.getLong(8), now - head.getLong(0)});
            return ConsumeResult.SUCCESS;
        });
        // A new group reads from where the queue ends when it first asks: send until
        // the consumer has one, so that no timed message is sent before that.
        long sequence = 0;
        long deadline = System.nanoTime() + WAIT_S * 1_000_000_000L;
        boolean warm = false;
        while (!warm) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("the consumer read nothing in " + WAIT_S + " s");
            }
            producer.send(message(topic, stampedBody(-(++sequence))));
            warm = arrived.poll(1, TimeUnit.SECONDS) != null;
        }
        for (int i = 0; i < WARMUP; i++) {
            producer.send(message(topic, stampedBody(-(++sequence))));
        }
        List<Double> took = new ArrayList<>(count);
        for (long i = 0; i < count; i++) {
            producer.send(message(topic, stampedBody(i)));
            while (true) {
                long[] got = arrived.poll(WAIT_S, TimeUnit.SECONDS);
                if (got == null) {
                    throw new IllegalStateException("message " + i + " not consumed in "
                        + WAIT_S + " s");
                }
                if (got[0] == i) {
                    took.add(got[1] / 1e9);
                    break;
                }
            }
        }
        return took;
    }

    static double consume(ClientConfiguration configuration, String topic, String group,
            int count) throws Exception {
        AtomicLong received = new AtomicLong();
        CountDownLatch all = new CountDownLatch(1);
        long started = System.nanoTime();
        pushConsumer(configuration, topic, group, view -> {
            if (received.incrementAndGet() >= count) {
                all.countDown();
            }
            return ConsumeResult.SUCCESS;
        }); // never closed, as in endToEnd
        if (!all.await(WAIT_S * 10, TimeUnit.SECONDS)) {
            throw new IllegalStateException("read " + received.get() + " of " + count);
        }
        return (System.nanoTime() - started) / 1e9;
    }

    static String took(List<Double> took) {
        StringBuilder out = new StringBuilder("{\"took\": [");
        for (int i = 0; i < took.size(); i++) {
            out.append(i == 0 ? "" : ", ").append(took.get(i));
        }
        return out.append("]}").toString();
    }

    static String seconds(double seconds) {
        return "{\"seconds\": " + seconds + "}";
    }
}

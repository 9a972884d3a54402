import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * The five workloads of bench.peers through the official Java 4.x client (rocketmq-client,
 * the OpenMessaging Benchmark's RocketMQ driver), with the client's default settings, so that
 * Apache RocketMQ and ferrymq are measured through the same, fastest client.
 *
 * <pre>
 * arguments: NAMESRV WORKLOAD TOPIC GROUP COUNT [WINDOW]
 *   sequential_send   one synchronous send at a time          -> {"took": [seconds, ...]}
 *   windowed_send     WINDOW asynchronous sends outstanding   -> {"seconds": s}
 *   batched_send      BATCHES_IN_FLIGHT threads, each sending batches of BATCH
 *                                                             -> {"seconds": s}
 *   end_to_end        send one, wait until the push consumer has it, repeat
 *                                                             -> {"took": [seconds, ...]}
 *   consume           COUNT stored first (batched, not timed), then read by a new group
 *                     from the first offset                   -> {"seconds": s}
 * </pre>
 *
 * Every send must come back SEND_OK; anything else ends the workload with exit status 1 and
 * its reason on stderr. The result is the last line of stdout (the client's own output is
 * sent to stderr).
 */
public final class PeerWorkloads {
    static final int BODY_BYTES = 1024;
    static final int BATCH = 128;
    static final int BATCHES_IN_FLIGHT = 16;
    static final int WARMUP = 50;
    static final long WAIT_S = 30;

    private static final java.io.PrintStream RESULT = System.out;

    public static void main(String[] args) throws Exception {
        System.setOut(System.err); // a library printing to stdout cannot garble the result
        String namesrv = args[0];
        String workload = args[1];
        String topic = args[2];
        String group = args[3];
        int count = Integer.parseInt(args[4]);
        int window = args.length > 5 ? Integer.parseInt(args[5]) : 0;
        String result;
        DefaultMQProducer producer = new DefaultMQProducer(group + "-producer");
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName("peer-producer-" + ProcessHandle.current().pid());
        producer.start();
        try {
            switch (workload) {
                case "sequential_send":
                    result = took(sequentialSend(producer, topic, count));
                    break;
                case "windowed_send":
                    result = seconds(windowedSend(producer, topic, count, window));
                    break;
                case "batched_send":
                    result = seconds(batchedSend(producer, topic, count, true));
                    break;
                case "end_to_end":
                    result = took(endToEnd(producer, namesrv, topic, group, count));
                    break;
                case "consume":
                    batchedSend(producer, topic, count, false); // exactly COUNT stored
                    result = seconds(consume(namesrv, topic, group, count));
                    break;
                default:
                    throw new IllegalArgumentException("no workload named " + workload);
            }
        } catch (Exception error) {
            System.err.println(workload + " failed: " + error);
            error.printStackTrace();
            System.exit(1);
            return;
        } finally {
            producer.shutdown();
        }
        RESULT.println(result);
        RESULT.flush();
        System.exit(0);
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

    static void sendOk(DefaultMQProducer producer, Message message) throws Exception {
        SendResult answer = producer.send(message);
        if (answer.getSendStatus() != SendStatus.SEND_OK) {
            throw new IllegalStateException("send answered " + answer.getSendStatus());
        }
    }

    static List<Double> sequentialSend(DefaultMQProducer producer, String topic, int count)
            throws Exception {
        byte[] body = plainBody();
        for (int i = 0; i < WARMUP; i++) {
            sendOk(producer, new Message(topic, body));
        }
        List<Double> took = new ArrayList<>(count);
        for (int i = 0; i < count; i++) {
            Message message = new Message(topic, body);
            long started = System.nanoTime();
            sendOk(producer, message);
            took.add((System.nanoTime() - started) / 1e9);
        }
        return took;
    }

    static double windowedSend(DefaultMQProducer producer, String topic, int count, int window)
            throws Exception {
        byte[] body = plainBody();
        for (int i = 0; i < WARMUP; i++) {
            sendOk(producer, new Message(topic, body));
        }
        Semaphore outstanding = new Semaphore(window);
        CountDownLatch answered = new CountDownLatch(count);
        AtomicReference<String> failure = new AtomicReference<>();
        long started = System.nanoTime();
        for (int i = 0; i < count && failure.get() == null; i++) {
            if (!outstanding.tryAcquire(WAIT_S, TimeUnit.SECONDS)) {
                throw new IllegalStateException("no answer within " + WAIT_S + " s");
            }
            producer.send(new Message(topic, body), new SendCallback() {
                @Override
                public void onSuccess(SendResult answer) {
                    if (answer.getSendStatus() != SendStatus.SEND_OK) {
                        failure.compareAndSet(null, "send answered " + answer.getSendStatus());
                    }
                    outstanding.release();
                    answered.countDown();
                }

                @Override
                public void onException(Throwable error) {
                    failure.compareAndSet(null, String.valueOf(error));
                    outstanding.release();
                    answered.countDown();
                }
            });
        }
        if (failure.get() == null && !answered.await(WAIT_S, TimeUnit.SECONDS)) {
            throw new IllegalStateException("answers missing after " + WAIT_S + " s");
        }
        if (failure.get() != null) {
            throw new IllegalStateException(failure.get());
        }
        return (System.nanoTime() - started) / 1e9;
    }

    static double batchedSend(DefaultMQProducer producer, String topic, int count,
            boolean warmUp) throws Exception {
        byte[] body = plainBody();
        for (int i = 0; warmUp && i < WARMUP; i++) {
            sendOk(producer, new Message(topic, body));
        }
        int batches = (count + BATCH - 1) / BATCH;
        AtomicLong next = new AtomicLong();
        AtomicReference<Exception> failure = new AtomicReference<>();
        List<Thread> senders = new ArrayList<>();
        long started = System.nanoTime();
        for (int t = 0; t < BATCHES_IN_FLIGHT; t++) {
            Thread sender = new Thread(() -> {
                try {
                    for (long b = next.getAndIncrement(); b < batches && failure.get() == null;
                            b = next.getAndIncrement()) {
                        int size = (int) Math.min(BATCH, count - b * BATCH);
                        List<Message> batch = new ArrayList<>(size);
                        for (int i = 0; i < size; i++) {
                            batch.add(new Message(topic, body));
                        }
                        SendResult answer = producer.send(batch);
                        if (answer.getSendStatus() != SendStatus.SEND_OK) {
                            throw new IllegalStateException("batch answered "
                                + answer.getSendStatus());
                        }
                    }
                } catch (Exception error) {
                    failure.compareAndSet(null, error);
                }
            });
            sender.start();
            senders.add(sender);
        }
        for (Thread sender : senders) {
            sender.join();
        }
        if (failure.get() != null) {
            throw failure.get();
        }
        return (System.nanoTime() - started) / 1e9;
    }

    static DefaultMQPushConsumer consumer(String namesrv, String topic, String group,
            ConsumeFromWhere from, MessageListenerConcurrently listener) throws Exception {
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("peer-consumer-" + ProcessHandle.current().pid());
        consumer.setConsumeFromWhere(from);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener(listener);
        return consumer;
    }

    static List<Double> endToEnd(DefaultMQProducer producer, String namesrv, String topic,
            String group, int count) throws Exception {
        BlockingQueue<long[]> arrived = new ArrayBlockingQueue<>(1 << 16);
        DefaultMQPushConsumer consumer = consumer(namesrv, topic, group,
            ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            (MessageListenerConcurrently) (messages, context) -> {
                long now = System.nanoTime();
                for (MessageExt m : messages) {
                    ByteBuffer head = ByteBuffer.wrap(m.getBody()).order(ByteOrder.LITTLE_ENDIAN);
                    arrived.offer(new long[] {head.getLong(8), now - head.getLong(0)});
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
        consumer.start();
        try {
            // Until the consumer owns the queue and reads: a warm-up message comes back.
            long sequence = 0;
            long deadline = System.nanoTime() + WAIT_S * 1_000_000_000L;
            boolean warm = false;
            while (!warm) {
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("the consumer read nothing in " + WAIT_S + " s");
                }
                sendOk(producer, new Message(topic, stampedBody(-(++sequence))));
                warm = arrived.poll(1, TimeUnit.SECONDS) != null;
            }
            for (int i = 0; i < WARMUP; i++) {
                sendOk(producer, new Message(topic, stampedBody(-(++sequence))));
            }
            List<Double> took = new ArrayList<>(count);
            for (long i = 0; i < count; i++) {
                sendOk(producer, new Message(topic, stampedBody(i)));
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
        } finally {
            consumer.shutdown();
        }
    }

    static double consume(String namesrv, String topic, String group, int count)
            throws Exception {
        AtomicLong received = new AtomicLong();
        CountDownLatch all = new CountDownLatch(1);
        DefaultMQPushConsumer consumer = consumer(namesrv, topic, group,
            ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            (MessageListenerConcurrently) (messages, context) -> {
                if (received.addAndGet(messages.size()) >= count) {
                    all.countDown();
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
        long started = System.nanoTime();
        consumer.start();
        try {
            if (!all.await(WAIT_S * 10, TimeUnit.SECONDS)) {
                throw new IllegalStateException("read " + received.get() + " of " + count);
            }
            return (System.nanoTime() - started) / 1e9;
        } finally {
            consumer.shutdown();
        }
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

import java.time.Duration;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * The same open-loop load (LoadSteps) through Apache Kafka's Java client with its own
 * defaults (since Kafka 4.0: acks=all, idempotence on, linger 5 ms, 16 KiB batches): one
 * KafkaProducer sending 1 KiB messages asynchronously at a fixed rate, one KafkaConsumer in
 * a group, polling on a thread of its own.
 *
 * <pre>
 * arguments: BOOTSTRAP TOPIC GROUP SIZE_BYTES DRAIN_S RATE:SECONDS[,RATE:SECONDS...]
 * </pre>
 *
 * The topic is new, so the consumer reads it from its start ("earliest"): nothing sent
 * before its group's assignment is missed. End to end runs from the record's timestamp
 * (CreateTime: the producer's clock at the send) to the consumer's poll. Error kinds: the
 * exception's class (the client retries on its own until delivery.timeout.ms, so an error
 * is a send it gave up).
 */
public final class KafkaLoadDriver {
    private static volatile boolean consuming = true;

    private KafkaLoadDriver() {
    }

    public static void main(String[] args) throws Exception {
        LoadSteps.keepStdoutForEvents();
        String bootstrap = args[0];
        String topic = args[1];
        String group = args[2];

        Properties reading = new Properties();
        reading.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        reading.put(ConsumerConfig.GROUP_ID_CONFIG, group + "-consumer");
        reading.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        reading.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        reading.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(reading);
        Thread poller = new Thread(() -> {
            try {
                consumer.subscribe(List.of(topic));
                while (consuming) {
                    for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(100))) {
                        LoadSteps.received(r.timestamp());
                    }
                }
            } catch (WakeupException stopping) {
                // asked to stop
            } finally {
                consumer.close(Duration.ofSeconds(5));
            }
        }, "load-consumer");
        poller.start();

        Properties writing = new Properties();
        writing.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        writing.put(ProducerConfig.CLIENT_ID_CONFIG, group + "-producer");
        writing.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        writing.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(writing);

        LoadSteps.run(args, 3, (body, sentAt, step) ->
            producer.send(new ProducerRecord<>(topic, body), (metadata, error) -> {
                if (error == null) {
                    step.acknowledged(sentAt);
                } else {
                    step.failed(error.getClass().getSimpleName(), error.getMessage(), sentAt);
                }
            }));
        producer.close(Duration.ofSeconds(10));
        consuming = false;
        consumer.wakeup();
        poller.join(10_000);
        LoadSteps.done();
    }
}

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
 * a fixed rate, one DefaultMQPushConsumer reading them. The steps, their pacing and their
 * events are LoadSteps'.
 *
 * <pre>
 * arguments: NAMESRV TOPIC GROUP SIZE_BYTES DRAIN_S RATE:SECONDS[,RATE:SECONDS...]
 * </pre>
 *
 * End to end runs from the message's born timestamp to the consumer's listener. Error kinds:
 * the broker's response code ("broker:2" is SYSTEM_BUSY), a send status other than SEND_OK
 * ("status:FLUSH_SLAVE_TIMEOUT"), else the exception's class.
 */
public final class LoadDriver {
    private LoadDriver() {
    }

    public static void main(String[] args) throws Exception {
        LoadSteps.keepStdoutForEvents();
        String namesrv = args[0];
        String topic = args[1];
        String group = args[2];

        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group + "-consumer");
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("load-consumer-" + ProcessHandle.current().pid());
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
            for (MessageExt m : messages) {
                LoadSteps.received(m.getBornTimestamp());
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();

        DefaultMQProducer producer = new DefaultMQProducer(group + "-producer");
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName("load-producer-" + ProcessHandle.current().pid());
        producer.start();

        LoadSteps.run(args, 3, (body, sentAt, step) -> {
            try {
                producer.send(new Message(topic, body), new SendCallback() {
                    @Override
                    public void onSuccess(SendResult result) {
                        if (result.getSendStatus() == SendStatus.SEND_OK) {
                            step.acknowledged(sentAt);
                        } else {
                            step.failed("status:" + result.getSendStatus().name(),
                                "written, not confirmed as the broker's mode asks", sentAt);
                        }
                    }

                    @Override
                    public void onException(Throwable error) {
                        step.failed(kindOf(error), error.getMessage(), sentAt);
                    }
                });
            } catch (Exception error) {
                step.refused(kindOf(error), error.getMessage());
            }
        });
        producer.shutdown();
        consumer.shutdown();
        LoadSteps.done();
    }

    /** "broker:CODE" when the broker answered with a code, else the exception's class. */
    private static String kindOf(Throwable error) {
        for (Throwable cause = error; cause != null; cause = cause.getCause()) {
            if (cause instanceof MQBrokerException) {
                return "broker:" + ((MQBrokerException) cause).getResponseCode();
            }
        }
        return error.getClass().getSimpleName();
    }
}

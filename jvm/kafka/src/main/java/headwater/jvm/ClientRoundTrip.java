package headwater.jvm;

import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * Java's own clients against a broker: an idempotent KafkaProducer sends {@code count} keyed
 * records, then a KafkaConsumer in a classic group reads them back and commits. Prints one JSON
 * object per line ({@code sent}, {@code received}, {@code committed}) for the caller to compare
 * with what it expects. Arguments: bootstrap servers, topic, group id, count, and optionally a
 * client properties file (security settings).
 */
public final class ClientRoundTrip {

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        String group = args[2];
        int count = Integer.parseInt(args[3]);

        Properties producerConfig = Programs.config(bootstrap, args, 4);
        producerConfig.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        producerConfig.put(ProducerConfig.ACKS_CONFIG, "all");
        Programs.sendKeyed(producerConfig, topic, count);

        Properties consumerConfig = Programs.classicConsumer(bootstrap, args, 4, group);
        try (KafkaConsumer<String, String> consumer =
                 new KafkaConsumer<>(consumerConfig, new StringDeserializer(), new StringDeserializer())) {
            consumer.subscribe(List.of(topic));
            Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
            int received = 0;
            while (received < count) {
                for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofSeconds(1))) {
                    Programs.print("received", record.partition(), record.offset(), record.key(), record.value());
                    next.put(new TopicPartition(record.topic(), record.partition()),
                             new OffsetAndMetadata(record.offset() + 1));
                    received++;
                }
            }
            consumer.commitSync(next);
            for (Map.Entry<TopicPartition, OffsetAndMetadata> committed : consumer.committed(next.keySet()).entrySet()) {
                Programs.printOffset("committed", committed.getKey().partition(), committed.getValue().offset());
            }
        }
    }
}

package headwater.jvm;

import java.time.Duration;
import java.util.List;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * Java's KafkaShareConsumer (KIP-932) reads {@code count} records from a topic as a member of a
 * share group, acknowledging each poll's records as accepted (implicitly, by the next poll, and
 * commitSync at the end). Prints a {@code received} line per record. Arguments: bootstrap servers,
 * topic, share group id, count, and optionally a client properties file.
 */
public final class ShareRead {

    public static void main(String[] args) throws Exception {
        Properties config = Programs.config(args[0], args, 4);
        config.put("group.id", args[2]);
        int count = Integer.parseInt(args[3]);
        try (KafkaShareConsumer<String, String> consumer =
                 new KafkaShareConsumer<>(config, new StringDeserializer(), new StringDeserializer())) {
            consumer.subscribe(List.of(args[1]));
            int received = 0;
            while (received < count) {
                for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofSeconds(1))) {
                    Programs.print("received", record.partition(), record.offset(), record.key(), record.value());
                    received++;
                }
            }
            consumer.commitSync();
        }
    }
}

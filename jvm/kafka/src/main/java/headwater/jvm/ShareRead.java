package headwater.jvm;

import java.time.Duration;
import java.util.List;
import java.util.Properties;

import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * Java's KafkaShareConsumer (KIP-932) reads {@code count} records from a topic as a member of a
 * share group. In {@code implicit} mode each poll's records are accepted by the next poll (and
 * commitSync at the end); in {@code explicit} mode each record is acknowledged on its own, and
 * the first delivery of every offset divisible by 5 is released, to come back with delivery
 * count 2, then accepted. Prints a {@code received} line per delivery with its delivery count
 * and what was done with it. Arguments: bootstrap servers, topic, share group id, count, mode
 * (implicit or explicit), and optionally a client properties file.
 */
public final class ShareRead {

    public static void main(String[] args) throws Exception {
        Properties config = Programs.config(args[0], args, 5);
        config.put("group.id", args[2]);
        int count = Integer.parseInt(args[3]);
        boolean explicit = args[4].equals("explicit");
        config.put("share.acknowledgement.mode", explicit ? "explicit" : "implicit");
        try (KafkaShareConsumer<String, String> consumer =
                 new KafkaShareConsumer<>(config, new StringDeserializer(), new StringDeserializer())) {
            consumer.subscribe(List.of(args[1]));
            int accepted = 0;
            while (accepted < count) {
                for (ConsumerRecord<String, String> record : consumer.poll(Duration.ofSeconds(1))) {
                    short deliveries = record.deliveryCount().orElse((short) 0);
                    AcknowledgeType done = explicit && record.offset() % 5 == 0 && deliveries == 1
                        ? AcknowledgeType.RELEASE : AcknowledgeType.ACCEPT;
                    if (explicit) {
                        consumer.acknowledge(record, done);
                    }
                    System.out.printf("{\"event\": \"received\", \"partition\": %d, \"offset\": %d, \"key\": \"%s\", "
                                      + "\"value\": \"%s\", \"delivery_count\": %d, \"acknowledged\": \"%s\"}%n",
                                      record.partition(), record.offset(), record.key(), record.value(), deliveries,
                                      done.name());
                    if (done == AcknowledgeType.ACCEPT) {
                        accepted++;
                    }
                }
                if (explicit) {
                    consumer.commitSync();
                }
            }
            consumer.commitSync();
        }
    }
}

package headwater.jvm;

import java.io.FileReader;
import java.io.IOException;
import java.io.Reader;
import java.util.Properties;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.StringSerializer;

/** What the test programs share: their client configuration and their JSON-lines output. */
final class Programs {

    private Programs() {
    }

    /** bootstrap.servers, plus the properties file's settings (security) when one is named. */
    static Properties config(String bootstrap, String[] args, int fileArg) throws IOException {
        Properties config = new Properties();
        if (args.length > fileArg) {
            try (Reader file = new FileReader(args[fileArg])) {
                config.load(file);
            }
        }
        config.put("bootstrap.servers", bootstrap);
        return config;
    }

    /** A classic-protocol group member that reads from the earliest offset and commits itself. */
    static Properties classicConsumer(String bootstrap, String[] args, int fileArg, String group) throws IOException {
        Properties config = config(bootstrap, args, fileArg);
        config.put("group.id", group);
        config.put("group.protocol", "classic");
        config.put("auto.offset.reset", "earliest");
        config.put("enable.auto.commit", "false");
        return config;
    }

    /** Sends records k0..k{count-1} with values v0..v{count-1}, each awaited, printing a {@code sent} line. */
    static void sendKeyed(Properties config, String topic, int count) throws Exception {
        try (KafkaProducer<String, String> producer =
                 new KafkaProducer<>(config, new StringSerializer(), new StringSerializer())) {
            for (int i = 0; i < count; i++) {
                RecordMetadata sent = producer.send(new ProducerRecord<>(topic, "k" + i, "v" + i)).get();
                print("sent", sent.partition(), sent.offset(), "k" + i, "v" + i);
            }
        }
    }

    // Keys and values are the ASCII the tests send: no escaping needed.
    static void print(String event, int partition, long offset, String key, String value) {
        System.out.printf("{\"event\": \"%s\", \"partition\": %d, \"offset\": %d, \"key\": \"%s\", \"value\": \"%s\"}%n",
                          event, partition, offset, key, value);
    }

    static void printOffset(String event, int partition, long offset) {
        System.out.printf("{\"event\": \"%s\", \"partition\": %d, \"offset\": %d}%n", event, partition, offset);
    }
}

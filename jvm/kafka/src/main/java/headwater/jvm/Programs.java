package headwater.jvm;

import java.io.FileReader;
import java.io.IOException;
import java.io.Reader;
import java.util.Properties;

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

    // Keys and values are the ASCII the tests send: no escaping needed.
    static void print(String event, int partition, long offset, String key, String value) {
        System.out.printf("{\"event\": \"%s\", \"partition\": %d, \"offset\": %d, \"key\": \"%s\", \"value\": \"%s\"}%n",
                          event, partition, offset, key, value);
    }

    static void printOffset(String event, int partition, long offset) {
        System.out.printf("{\"event\": \"%s\", \"partition\": %d, \"offset\": %d}%n", event, partition, offset);
    }
}

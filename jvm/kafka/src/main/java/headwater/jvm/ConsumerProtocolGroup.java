package headwater.jvm;

import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * {@code members} KafkaConsumers with {@code group.protocol=consumer} (KIP-848: the broker
 * assigns) in one group, one thread each. Once every member holds partitions and together they
 * hold all of the topic's, a KafkaProducer sends {@code count} keyed records; the members read
 * them, each committing after every poll that returned records, until all are read. Prints
 * {@code assigned} (per member and partition, once the group is stable), {@code sent},
 * {@code received} and {@code committed} lines, each with its member's index where it has one.
 * Arguments: bootstrap servers, topic, group id, members, count, and optionally a client
 * properties file.
 */
public final class ConsumerProtocolGroup {

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        String group = args[2];
        int members = Integer.parseInt(args[3]);
        int count = Integer.parseInt(args[4]);

        Properties config = Programs.config(bootstrap, args, 5);
        Map<Integer, Set<TopicPartition>> assignments = new ConcurrentHashMap<>();
        AtomicInteger received = new AtomicInteger();
        AtomicBoolean done = new AtomicBoolean();
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < members; i++) {
            int member = i;
            Thread thread = new Thread(() -> consume(config, topic, group, member, assignments, received, done));
            thread.start();
            threads.add(thread);
        }
        int partitions = awaitStable(config, topic, members, assignments);
        for (Map.Entry<Integer, Set<TopicPartition>> assigned : assignments.entrySet()) {
            for (TopicPartition tp : assigned.getValue()) {
                System.out.printf("{\"event\": \"assigned\", \"member\": %d, \"partition\": %d}%n",
                                  assigned.getKey(), tp.partition());
            }
        }
        Programs.sendKeyed(config, topic, count);
        Instant deadline = Instant.now().plusSeconds(60);
        while (received.get() < count && Instant.now().isBefore(deadline)) {
            Thread.sleep(50);
        }
        done.set(true);
        for (Thread thread : threads) {
            thread.join();
        }
        if (partitions == 0 || received.get() < count) {
            throw new IllegalStateException("the group never became stable, or not every record was read");
        }
    }

    /** Until every member holds partitions and together they hold all of them, once each: their count. */
    private static int awaitStable(Properties config, String topic, int members,
                                   Map<Integer, Set<TopicPartition>> assignments) throws Exception {
        int partitions;
        try (KafkaConsumer<String, String> metadata =
                 new KafkaConsumer<>(config, new StringDeserializer(), new StringDeserializer())) {
            partitions = metadata.partitionsFor(topic).size();
        }
        Instant deadline = Instant.now().plusSeconds(60);
        while (Instant.now().isBefore(deadline)) {
            Set<TopicPartition> union = new HashSet<>();
            int held = 0;
            for (Set<TopicPartition> assigned : assignments.values()) {
                union.addAll(assigned);
                held += assigned.size();
            }
            if (assignments.size() == members && assignments.values().stream().noneMatch(Set::isEmpty)
                    && union.size() == partitions && held == partitions) {
                return partitions;
            }
            Thread.sleep(50);
        }
        return 0;
    }

    private static void consume(Properties clientConfig, String topic, String group, int member,
                                Map<Integer, Set<TopicPartition>> assignments, AtomicInteger received,
                                AtomicBoolean done) {
        Properties config = new Properties();
        config.putAll(clientConfig);
        config.put("group.id", group);
        config.put("group.protocol", "consumer");
        config.put("auto.offset.reset", "earliest");
        config.put("enable.auto.commit", "false");
        try (KafkaConsumer<String, String> consumer =
                 new KafkaConsumer<>(config, new StringDeserializer(), new StringDeserializer())) {
            consumer.subscribe(List.of(topic));
            while (!done.get()) {
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
                assignments.put(member, new HashSet<>(consumer.assignment()));
                for (ConsumerRecord<String, String> record : records) {
                    System.out.printf("{\"event\": \"received\", \"member\": %d, \"partition\": %d, \"offset\": %d, "
                                      + "\"key\": \"%s\", \"value\": \"%s\"}%n", member, record.partition(),
                                      record.offset(), record.key(), record.value());
                }
                if (!records.isEmpty()) {
                    consumer.commitSync();
                    for (TopicPartition tp : records.partitions()) {
                        System.out.printf("{\"event\": \"committed\", \"member\": %d, \"partition\": %d, "
                                          + "\"offset\": %d}%n", member, tp.partition(), consumer.position(tp));
                    }
                    received.addAndGet(records.count());
                }
            }
        }
    }
}

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * bench/share_groups.py's share consumers in Java: for each consumer count, that many
 * KafkaShareConsumers (threads of this JVM, implicit acknowledgement, 500 records a poll) in a new
 * share group read {@code total} records; prints the count and the acknowledged records per second:
 * the acknowledgements the broker answered while the consumers read (the acknowledgement commit
 * callback's offsets), over the time from the first delivery to the last of those answers, the
 * clock the bench's Python consumers use (the last poll's acknowledgement, sent at close behind a
 * ShareFetch that waits out its max wait, is a fixed tail left out on both).
 * Run from source (java -cp 'kafka jars' ShareRate.java).
 * Arguments: bootstrap servers, topic, group prefix (the group is prefix + count), total, counts...
 */
public final class ShareRate {

    public static void main(String[] args) throws Exception {
        Thread.setDefaultUncaughtExceptionHandler((thread, error) -> {   // no consumer left waiting for the rest
            error.printStackTrace();
            System.exit(1);
        });
        long total = Long.parseLong(args[3]);
        for (int i = 4; i < args.length; i++) {
            int consumers = Integer.parseInt(args[i]);
            System.out.printf("%d %.1f%n", consumers, rate(args[0], args[1], args[2] + consumers, consumers, total));
        }
    }

    static double rate(String bootstrap, String topic, String group, int consumers, long total) throws Exception {
        AtomicLong read = new AtomicLong();
        AtomicLong acknowledged = new AtomicLong();
        AtomicLong first = new AtomicLong(Long.MAX_VALUE);
        AtomicLong last = new AtomicLong();
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < consumers; i++) {
            Thread thread = new Thread(() -> {
                Properties config = new Properties();
                config.put("bootstrap.servers", bootstrap);
                config.put("group.id", group);
                config.put("max.poll.records", "500");
                try (KafkaShareConsumer<byte[], byte[]> consumer =
                         new KafkaShareConsumer<>(config, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
                    long[] answered = {0};
                    boolean[] reading = {true};   // answers dispatched by close are the tail left out
                    consumer.setAcknowledgementCommitCallback((offsets, error) -> {
                        if (error == null && reading[0]) {
                            answered[0] += offsets.values().stream().mapToLong(Set::size).sum();
                            last.accumulateAndGet(System.nanoTime(), Math::max);
                        }
                    });
                    consumer.subscribe(List.of(topic));
                    long mine = 0;
                    while (read.get() < total) {
                        int count = consumer.poll(Duration.ofMillis(100)).count();
                        if (count > 0) {
                            first.accumulateAndGet(System.nanoTime(), Math::min);
                            read.addAndGet(count);
                            mine += count;
                        }
                    }
                    reading[0] = false;
                    if (answered[0] == 0) {   // all in one poll, none answered yet: up to its commit
                        consumer.commitSync();
                        answered[0] = mine;
                        last.accumulateAndGet(System.nanoTime(), Math::max);
                    }
                    acknowledged.addAndGet(answered[0]);
                }
            });
            thread.start();
            threads.add(thread);
        }
        for (Thread thread : threads) {
            thread.join();
        }
        return acknowledged.get() / ((last.get() - first.get()) / 1e9);
    }
}

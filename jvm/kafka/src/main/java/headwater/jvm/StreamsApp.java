package headwater.jvm;

import java.time.Duration;
import java.util.Arrays;
import java.util.Locale;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.WindowStore;

/**
 * A Kafka Streams application with exactly_once_v2 and three sub-topologies:
 * <ul>
 * <li>word count: lines split into lower-case words, grouped by word (through a repartition
 * topic), counted in the persistent store {@code word-counts} (with its changelog), each count
 * to the counts topic as a long;</li>
 * <li>a windowed count: events counted per key in tumbling 10 s windows on their timestamps
 * (5 s grace), each window's count to the windowed topic keyed {@code key@windowStartMs};</li>
 * <li>a KTable–KTable inner join of two tables on their key, {@code left+right} to the joined
 * topic (a tombstone when either side is deleted). The tables' stores have no cache: with
 * Streams' record cache a run once ended with a key deleted on both sides within one commit
 * still joined in the output (our reading: each side's deletion, flushed from the cache, found
 * the other side already gone and forwarded nothing), a matter of Streams, not of the broker.</li>
 * </ul>
 * Prints {@code RUNNING} each time a rebalance ends in that state (a line to wait for), and its
 * last state when it stops. Arguments: bootstrap
 * servers, application id, state directory, then the topics: lines, counts, events, windowed,
 * left, right, joined.
 */
public final class StreamsApp {

    public static void main(String[] args) throws Exception {
        Properties config = new Properties();
        config.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        config.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        config.put(StreamsConfig.STATE_DIR_CONFIG, args[2]);
        config.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        config.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        config.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 2);
        // DeleteRecords on the repartition topic up to what is committed, every second (default 30 s)
        config.put(StreamsConfig.REPARTITION_PURGE_INTERVAL_MS_CONFIG, 1000);
        config.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
        // A killed instance's members leave the group at their session's end: the smallest a broker allows.
        config.put(StreamsConfig.consumerPrefix("session.timeout.ms"), 6000);
        config.put(StreamsConfig.consumerPrefix("heartbeat.interval.ms"), 1000);

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(args[3], Consumed.with(Serdes.String(), Serdes.String()))
               .flatMapValues(line -> Arrays.asList(line.toLowerCase(Locale.ROOT).split("\\W+")))
               .filter((key, word) -> !word.isEmpty())
               .groupBy((key, word) -> word, Grouped.with("words", Serdes.String(), Serdes.String()))
               .count(Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as("word-counts"))
               .toStream()
               .to(args[4], Produced.with(Serdes.String(), Serdes.Long()));

        builder.stream(args[5], Consumed.with(Serdes.String(), Serdes.String()))
               .groupByKey(Grouped.with(Serdes.String(), Serdes.String()))
               .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofSeconds(10), Duration.ofSeconds(5)))
               .count(Materialized.<String, Long, WindowStore<Bytes, byte[]>>as("window-counts"))
               .toStream()
               .map((window, count) -> KeyValue.pair(window.key() + "@" + window.window().start(), count))
               .to(args[6], Produced.with(Serdes.String(), Serdes.Long()));

        KTable<String, String> left = builder.table(args[7], Consumed.with(Serdes.String(), Serdes.String()),
                                                    Materialized.<String, String, KeyValueStore<Bytes, byte[]>>as("left-table")
                                                                .withCachingDisabled());
        KTable<String, String> right = builder.table(args[8], Consumed.with(Serdes.String(), Serdes.String()),
                                                     Materialized.<String, String, KeyValueStore<Bytes, byte[]>>as("right-table")
                                                                 .withCachingDisabled());
        left.join(right, (l, r) -> l + "+" + r)
            .toStream()
            .to(args[9], Produced.with(Serdes.String(), Serdes.String()));

        KafkaStreams streams = new KafkaStreams(builder.build(), config);
        CountDownLatch stopped = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            if (now == KafkaStreams.State.RUNNING && before == KafkaStreams.State.REBALANCING) {
                System.out.println("RUNNING");
                System.out.flush();
            }
            if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
                stopped.countDown();
            }
        });
        streams.setUncaughtExceptionHandler(error -> {
            error.printStackTrace();
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        Runtime.getRuntime().addShutdownHook(new Thread(streams::close));
        streams.start();
        stopped.await();
        System.out.println(streams.state());
    }
}

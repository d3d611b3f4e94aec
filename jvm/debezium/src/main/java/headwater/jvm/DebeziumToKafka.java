package headwater.jvm;

import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

import io.debezium.engine.ChangeEvent;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.format.Json;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Debezium's PostgreSQL connector in its embedded engine, writing every change event into a
 * Kafka broker with a KafkaProducer, as Debezium Server's Kafka sink does: JSON keys and values
 * (no schemas), acks=all and idempotent (the producer's defaults), and a batch's offsets are
 * marked processed only once the broker has acknowledged all of its records. The producer
 * batches as headwater cdc's does (up to 1 MB a partition, 5 ms linger; the Java client's
 * default batch is 16 KB), so that the connectors are compared rather than two clients'
 * defaults. Streams from the
 * connector's own slot and publication (pgoutput, no snapshot) until the JVM is stopped.
 * Arguments: bootstrap servers, PostgreSQL host, port, user, database, table include list
 * (schema.table,...), topic prefix, replication slot and publication name.
 */
public final class DebeziumToKafka {

    public static void main(String[] args) throws Exception {
        Properties producerConfig = new Properties();
        producerConfig.put("bootstrap.servers", args[0]);
        producerConfig.put("batch.size", "1000000");
        producerConfig.put("linger.ms", "5");
        KafkaProducer<String, String> producer =
            new KafkaProducer<>(producerConfig, new StringSerializer(), new StringSerializer());

        Properties config = new Properties();
        config.put("name", "headwater-bench");
        config.put("connector.class", "io.debezium.connector.postgresql.PostgresConnector");
        config.put("offset.storage", "org.apache.kafka.connect.storage.MemoryOffsetBackingStore");
        config.put("database.hostname", args[1]);
        config.put("database.port", args[2]);
        config.put("database.user", args[3]);
        config.put("database.password", "");
        config.put("database.dbname", args[4]);
        config.put("table.include.list", args[5]);
        config.put("topic.prefix", args[6]);
        config.put("slot.name", args[7]);
        config.put("publication.name", args[7]);
        config.put("publication.autocreate.mode", "filtered");
        config.put("plugin.name", "pgoutput");
        config.put("snapshot.mode", "no_data");
        config.put("converter.schemas.enable", "false");

        DebeziumEngine<ChangeEvent<String, String>> engine = DebeziumEngine.create(Json.class)
            .using(config)
            .notifying((List<ChangeEvent<String, String>> batch,
                        DebeziumEngine.RecordCommitter<ChangeEvent<String, String>> committer) -> {
                List<Future<RecordMetadata>> sent = new ArrayList<>(batch.size());
                for (ChangeEvent<String, String> event : batch) {
                    sent.add(producer.send(new ProducerRecord<>(event.destination(), event.key(), event.value())));
                }
                for (int i = 0; i < batch.size(); i++) {
                    try {
                        sent.get(i).get();
                    } catch (java.util.concurrent.ExecutionException e) {
                        throw new IllegalStateException("the broker refused a change event", e.getCause());
                    }
                    committer.markProcessed(batch.get(i));
                }
                committer.markBatchFinished();
            })
            .using((success, message, error) -> {
                if (!success) {
                    System.err.println("Debezium stopped: " + message);
                    if (error != null) {
                        error.printStackTrace();
                    }
                    Runtime.getRuntime().halt(1);
                }
            })
            .build();
        ExecutorService executor = Executors.newSingleThreadExecutor();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                engine.close();
            } catch (java.io.IOException e) {
                e.printStackTrace();
            }
            producer.close();
        }));
        executor.execute(engine);
    }
}

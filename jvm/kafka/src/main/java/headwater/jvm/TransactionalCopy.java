package headwater.jvm;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.Future;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Consume-transform-produce with Java's transactional KafkaProducer: one aborted transaction
 * first (records that no read_committed reader may see), then every input record copied to the
 * output topic, upper-cased, each poll's copies committed in one transaction together with the
 * group's offsets (sendOffsetsToTransaction). Prints {@code aborted} and {@code copied} lines (the
 * output's partition and offset) and the group's {@code committed} offsets. Arguments: bootstrap
 * servers, input topic, output topic, group id, transactional id, count of input records.
 */
public final class TransactionalCopy {

    public static void main(String[] args) throws Exception {
        Properties consumerConfig = Programs.classicConsumer(args[0], args, 6, args[3]);
        consumerConfig.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        Properties producerConfig = Programs.config(args[0], args, 6);
        String output = args[2];
        int count = Integer.parseInt(args[5]);
        producerConfig.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, args[4]);

        try (KafkaConsumer<String, String> consumer =
                 new KafkaConsumer<>(consumerConfig, new StringDeserializer(), new StringDeserializer());
             KafkaProducer<String, String> producer =
                 new KafkaProducer<>(producerConfig, new StringSerializer(), new StringSerializer())) {
            producer.initTransactions();
            producer.beginTransaction();
            for (int i = 0; i < 3; i++) {
                RecordMetadata sent = producer.send(new ProducerRecord<>(output, "aborted", "aborted" + i)).get();
                Programs.print("aborted", sent.partition(), sent.offset(), "aborted", "aborted" + i);
            }
            producer.abortTransaction();

            consumer.subscribe(List.of(args[1]));
            Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
            int copied = 0;
            while (copied < count) {
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofSeconds(1));
                if (records.isEmpty()) {
                    continue;
                }
                producer.beginTransaction();
                List<Future<RecordMetadata>> sends = new ArrayList<>();
                List<ProducerRecord<String, String>> copies = new ArrayList<>();
                for (ConsumerRecord<String, String> record : records) {
                    ProducerRecord<String, String> copy = new ProducerRecord<>(output, record.key(), record.value().toUpperCase());
                    copies.add(copy);
                    sends.add(producer.send(copy));
                    next.put(new TopicPartition(record.topic(), record.partition()), new OffsetAndMetadata(record.offset() + 1));
                }
                producer.sendOffsetsToTransaction(new HashMap<>(next), consumer.groupMetadata());
                producer.commitTransaction();
                for (int i = 0; i < sends.size(); i++) {
                    RecordMetadata sent = sends.get(i).get();
                    Programs.print("copied", sent.partition(), sent.offset(), copies.get(i).key(), copies.get(i).value());
                }
                copied += records.count();
            }
            for (Map.Entry<TopicPartition, OffsetAndMetadata> committed : consumer.committed(next.keySet()).entrySet()) {
                Programs.printOffset("committed", committed.getKey().partition(), committed.getValue().offset());
            }
        }
    }
}

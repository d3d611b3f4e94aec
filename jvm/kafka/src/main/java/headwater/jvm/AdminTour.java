package headwater.jvm;

import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.AbortTransactionSpec;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ClassicGroupDescription;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.CreateTopicsOptions;
import org.apache.kafka.clients.admin.FeatureMetadata;
import org.apache.kafka.clients.admin.FeatureUpdate;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.MemberToRemove;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.RemoveMembersFromConsumerGroupOptions;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.ShareGroupDescription;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.admin.UpdateFeaturesOptions;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.admin.UserScramCredentialsDescription;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.TopicPartitionReplica;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourceType;

/**
 * Every method of Kafka's {@code Admin} whose API a broker may serve, called once against it, in
 * an order where each call finds what the earlier ones made. Prints one JSON object per method:
 * {@code {"method", "ok", "result", "error"}}: the result summarized as plain JSON when the call
 * succeeded, the exception's class and message when it failed. The caller compares each line with
 * what it set up and reads back with another client.
 *
 * <p>Arguments: bootstrap servers, then {@code name=value} pairs naming what the caller set up:
 * {@code topic} (records produced to every partition), {@code classic} (a classic group with
 * committed offsets and no members), {@code consumer} (a consumer-protocol group with a member),
 * {@code static.group} and {@code static.instance} (a classic group with a static member),
 * {@code doomed} (a group with offsets only, to delete), {@code share} (a share group),
 * {@code txn} (a transactional id with an open transaction) and {@code prefix} (for the topics,
 * user, client id and ACLs the tour makes).
 */
public final class AdminTour {

    private static final long TIMEOUT_S = 30;

    private final Admin admin;
    private final Map<String, String> names;

    private AdminTour(Admin admin, Map<String, String> names) {
        this.admin = admin;
        this.names = names;
    }

    public static void main(String[] args) throws Exception {
        Map<String, String> names = new HashMap<>();
        for (int i = 1; i < args.length; i++) {
            String[] pair = args[i].split("=", 2);
            names.put(pair[0], pair[1]);
        }
        Properties config = Programs.config(args[0], args, args.length);
        config.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "20000");
        config.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        try (Admin admin = Admin.create(config)) {
            new AdminTour(admin, names).run();
        }
    }

    private String name(String key) {
        String value = names.get(key);
        if (value == null) {
            throw new IllegalArgumentException("missing argument " + key + "=...");
        }
        return value;
    }

    private static <T> T get(org.apache.kafka.common.KafkaFuture<T> future) throws Exception {
        return future.get(TIMEOUT_S, TimeUnit.SECONDS);
    }

    /** Runs one call and prints its line; a failure is reported, never thrown, so the tour goes on. */
    private static void step(String method, Callable<Object> call) {
        Map<String, Object> line = new LinkedHashMap<>();
        line.put("method", method);
        try {
            Object result = call.call();
            line.put("ok", true);
            line.put("result", result);
            line.put("error", null);
        } catch (Exception e) {
            Throwable cause = e instanceof ExecutionException && e.getCause() != null ? e.getCause() : e;
            line.put("ok", false);
            line.put("result", null);
            line.put("error", cause.getClass().getName() + ": " + cause.getMessage());
        }
        System.out.println(Json.write(line));
        System.out.flush();
    }

    private void run() throws Exception {
        String prefix = name("prefix");
        String topic = name("topic");
        String created = prefix + "-created";
        String doomedTopic = prefix + "-deleted";
        int node = get(admin.describeCluster().nodes()).iterator().next().id();
        ConfigResource broker = new ConfigResource(ConfigResource.Type.BROKER, String.valueOf(node));
        ConfigResource createdTopic = new ConfigResource(ConfigResource.Type.TOPIC, created);
        ConfigResource shareGroup = new ConfigResource(ConfigResource.Type.GROUP, name("share"));
        TopicPartition first = new TopicPartition(topic, 0);
        List<TopicPartition> partitions = new ArrayList<>();

        // --- cluster and topics ---
        step("describeCluster", () -> {
            var cluster = admin.describeCluster();
            return map("clusterId", get(cluster.clusterId()), "controller", get(cluster.controller()).id(),
                       "nodes", get(cluster.nodes()).stream().map(Node::id).sorted().toList());
        });
        step("describeFeatures", () -> {
            FeatureMetadata features = get(admin.describeFeatures().featureMetadata());
            Map<String, Object> finalized = new TreeMap<>();
            features.finalizedFeatures().forEach((k, v) -> finalized.put(k, List.of(v.minVersionLevel(), v.maxVersionLevel())));
            Map<String, Object> supported = new TreeMap<>();
            features.supportedFeatures().forEach((k, v) -> supported.put(k, List.of(v.minVersion(), v.maxVersion())));
            return map("finalized", finalized, "supported", supported);
        });
        step("createTopics", () -> {
            NewTopic withConfig = new NewTopic(created, 2, (short) 1).configs(Map.of("retention.ms", "3600000"));
            var result = admin.createTopics(List.of(withConfig, new NewTopic(doomedTopic, 1, (short) 1)));
            get(result.all());
            return map(created, map("partitions", get(result.numPartitions(created)), "topicId", get(result.topicId(created)),
                                    "retention.ms", get(result.config(created)).get("retention.ms").value()),
                       doomedTopic, map("partitions", get(result.numPartitions(doomedTopic))));
        });
        step("createTopics(validateOnly)", () -> {
            String checked = prefix + "-validated";
            NewTopic compacted = new NewTopic(checked, 5, (short) 1).configs(Map.of("cleanup.policy", "compact"));
            var result = admin.createTopics(List.of(compacted), new CreateTopicsOptions().validateOnly(true));
            return map(checked, map("partitions", get(result.numPartitions(checked)),
                                    "cleanup.policy", get(result.config(checked)).get("cleanup.policy").value()));
        });
        step("listTopics", () -> get(admin.listTopics().names()).stream().sorted().toList());
        step("describeTopics", () -> {
            Map<String, Object> topics = new TreeMap<>();
            for (TopicDescription d : get(admin.describeTopics(List.of(topic, created)).allTopicNames()).values()) {
                topics.put(d.name(), map("partitions", d.partitions().size(), "topicId", d.topicId(),
                                         "leaders", d.partitions().stream().map(p -> p.leader().id()).toList()));
                for (TopicPartitionInfo p : d.partitions()) {
                    if (d.name().equals(topic)) {
                        partitions.add(new TopicPartition(topic, p.partition()));
                    }
                }
            }
            return topics;
        });
        step("createPartitions", () -> {
            get(admin.createPartitions(Map.of(created, NewPartitions.increaseTo(4))).all());
            return map(created, 4);
        });

        // --- configs ---
        step("describeConfigs", () -> {
            Map<ConfigResource, Config> configs = get(admin.describeConfigs(List.of(createdTopic, broker, shareGroup)).all());
            ConfigEntry retention = configs.get(createdTopic).get("retention.ms");
            return map("topic", map("retention.ms", retention.value(), "source", retention.source()),
                       "broker", configs.get(broker).entries().size(),
                       "group", value(configs.get(shareGroup), "share.auto.offset.reset"));
        });
        step("incrementalAlterConfigs", () -> {
            Map<ConfigResource, Collection<AlterConfigOp>> ops = new LinkedHashMap<>();
            ops.put(createdTopic, List.of(set("retention.ms", "7200000"), set("cleanup.policy", "compact")));
            ops.put(broker, List.of(set("log.retention.ms", "86400000")));
            ops.put(shareGroup, List.of(set("share.auto.offset.reset", "earliest")));
            var futures = admin.incrementalAlterConfigs(ops).values();
            Map<String, Object> done = new LinkedHashMap<>();
            for (var resource : ops.keySet()) {
                get(futures.get(resource));
                done.put(resource.type() + ":" + resource.name(), "altered");
            }
            return done;
        });
        step("incrementalAlterConfigs(client-metrics)", () -> {
            ConfigResource metrics = new ConfigResource(ConfigResource.Type.CLIENT_METRICS, prefix + "-metrics");
            get(admin.incrementalAlterConfigs(Map.of(metrics, List.of(set("interval.ms", "60000")))).all());
            return "altered";
        });

        // --- records and offsets ---
        step("deleteRecords", () -> map(first.toString(),
            get(admin.deleteRecords(Map.of(first, RecordsToDelete.beforeOffset(2))).lowWatermarks().get(first)).lowWatermark()));
        step("listOffsets", () -> {
            Map<String, Object> offsets = new TreeMap<>();
            for (var spec : List.of(Map.entry("earliest", OffsetSpec.earliest()), Map.entry("latest", OffsetSpec.latest()),
                                    Map.entry("maxTimestamp", OffsetSpec.maxTimestamp()))) {
                Map<TopicPartition, OffsetSpec> asked = new HashMap<>();
                partitions.forEach(tp -> asked.put(tp, spec.getValue()));
                Map<String, Object> found = new TreeMap<>();
                for (Map.Entry<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> e : get(admin.listOffsets(asked).all()).entrySet()) {
                    found.put(String.valueOf(e.getKey().partition()), e.getValue().offset());
                }
                offsets.put(spec.getKey(), found);
            }
            return offsets;
        });
        step("describeLogDirs", () -> {
            Map<String, Object> sizes = new TreeMap<>();
            for (LogDirDescription dir : get(admin.describeLogDirs(List.of(node)).allDescriptions()).get(node).values()) {
                dir.replicaInfos().forEach((tp, info) -> {
                    if (tp.topic().equals(topic)) {
                        sizes.put(tp.toString(), info.size());
                    }
                });
            }
            return sizes;
        });
        step("describeReplicaLogDirs", () -> {
            TopicPartitionReplica replica = new TopicPartitionReplica(topic, 0, node);
            return map("currentReplicaLogDir", get(admin.describeReplicaLogDirs(List.of(replica)).all()).get(replica).getCurrentReplicaLogDir());
        });

        // --- groups ---
        step("listGroups", () -> {
            Map<String, Object> groups = new TreeMap<>();
            for (GroupListing g : get(admin.listGroups().all())) {
                groups.put(g.groupId(), map("type", g.type().map(Object::toString).orElse(null),
                                            "state", g.groupState().map(Object::toString).orElse(null),
                                            "protocol", g.protocol()));
            }
            return groups;
        });
        step("listConsumerGroups", () -> {
            Map<String, Object> groups = new TreeMap<>();
            for (ConsumerGroupListing g : get(admin.listConsumerGroups().all())) {
                groups.put(g.groupId(), map("type", g.type().map(Object::toString).orElse(null),
                                            "state", g.groupState().map(Object::toString).orElse(null)));
            }
            return groups;
        });
        step("describeConsumerGroups", () -> {
            Map<String, Object> groups = new TreeMap<>();
            var asked = List.of(name("classic"), name("consumer"), name("static.group"));
            for (ConsumerGroupDescription g : get(admin.describeConsumerGroups(asked).all()).values()) {
                groups.put(g.groupId(), map("type", g.type(), "state", g.groupState(), "assignor", g.partitionAssignor(),
                                            "groupEpoch", g.groupEpoch().orElse(null),
                                            "targetAssignmentEpoch", g.targetAssignmentEpoch().orElse(null),
                                            "members", members(g.members())));
            }
            return groups;
        });
        step("describeClassicGroups", () -> {
            ClassicGroupDescription g = get(admin.describeClassicGroups(List.of(name("static.group"))).all()).get(name("static.group"));
            return map("state", g.state(), "protocol", g.protocol(), "protocolData", g.protocolData(),
                       "members", members(g.members()));
        });
        step("listConsumerGroupOffsets", () -> offsets(get(admin.listConsumerGroupOffsets(name("classic")).partitionsToOffsetAndMetadata())));
        step("alterConsumerGroupOffsets", () -> {
            Map<TopicPartition, OffsetAndMetadata> to = new HashMap<>();
            for (TopicPartition tp : partitions) {
                to.put(tp, new OffsetAndMetadata(3 + tp.partition(), "tour"));
            }
            get(admin.alterConsumerGroupOffsets(name("classic"), to).all());
            return offsets(to);
        });
        step("deleteConsumerGroupOffsets", () -> {
            TopicPartition last = partitions.get(partitions.size() - 1);
            get(admin.deleteConsumerGroupOffsets(name("classic"), Set.of(last)).all());
            return List.of(last.toString());
        });
        step("removeMembersFromConsumerGroup", () -> {
            var options = new RemoveMembersFromConsumerGroupOptions(List.of(new MemberToRemove(name("static.instance"))));
            get(admin.removeMembersFromConsumerGroup(name("static.group"), options).all());
            return List.of(name("static.instance"));
        });
        step("deleteConsumerGroups", () -> {
            get(admin.deleteConsumerGroups(List.of(name("doomed"))).all());
            return List.of(name("doomed"));
        });
        step("describeShareGroups", () -> {
            ShareGroupDescription g = get(admin.describeShareGroups(List.of(name("share"))).all()).get(name("share"));
            return map("state", g.groupState(), "members", g.members().size(), "groupEpoch", g.groupEpoch());
        });
        step("deleteShareGroups", () -> {
            get(admin.deleteShareGroups(List.of(name("share"))).all());
            return List.of(name("share"));
        });

        // --- ACLs, users, quotas ---
        String principal = "User:" + prefix + "-reader";
        AccessControlEntry read = new AccessControlEntry(principal, "*", AclOperation.READ, AclPermissionType.ALLOW);
        // on resources nothing else uses: an ACL makes the broker check every client's access to its resource
        String guarded = prefix + "-guarded";
        AclBinding onTopic = new AclBinding(new ResourcePattern(ResourceType.TOPIC, guarded, PatternType.LITERAL), read);
        AclBinding onGroups = new AclBinding(new ResourcePattern(ResourceType.GROUP, guarded + "-", PatternType.PREFIXED), read);
        step("createAcls", () -> {
            get(admin.createAcls(List.of(onTopic, onGroups)).all());
            return acls(List.of(onTopic, onGroups));
        });
        step("describeAcls", () -> acls(get(admin.describeAcls(AclBindingFilter.ANY).values())));
        step("deleteAcls", () -> acls(get(admin.deleteAcls(List.of(onGroups.toFilter())).all())));
        String user = prefix + "-user";
        step("alterUserScramCredentials", () -> {
            var upsert = new UserScramCredentialUpsertion(user, new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), "tour-pw");
            get(admin.alterUserScramCredentials(List.of(upsert)).all());
            return List.of(user);
        });
        step("describeUserScramCredentials", () -> {
            Map<String, Object> users = new TreeMap<>();
            for (Map.Entry<String, UserScramCredentialsDescription> e : get(admin.describeUserScramCredentials(List.of(user)).all()).entrySet()) {
                users.put(e.getKey(), e.getValue().credentialInfos().stream()
                    .map(c -> map("mechanism", c.mechanism(), "iterations", c.iterations())).toList());
            }
            return users;
        });
        String clientId = prefix + "-client";
        step("alterClientQuotas", () -> {
            var entity = new ClientQuotaEntity(Map.of(ClientQuotaEntity.CLIENT_ID, clientId));
            get(admin.alterClientQuotas(List.of(new ClientQuotaAlteration(entity, List.of(
                new ClientQuotaAlteration.Op("producer_byte_rate", 1048576.0),
                new ClientQuotaAlteration.Op("consumer_byte_rate", 2048.0))))).all());
            return map(clientId, map("producer_byte_rate", 1048576.0, "consumer_byte_rate", 2048.0));
        });
        step("alterClientQuotas(user)", () -> {
            var entity = new ClientQuotaEntity(Map.of(ClientQuotaEntity.USER, user));
            get(admin.alterClientQuotas(List.of(new ClientQuotaAlteration(entity, List.of(
                new ClientQuotaAlteration.Op("producer_byte_rate", 1024.0))))).all());
            return "altered";
        });
        step("describeClientQuotas", () -> {
            Map<String, Object> quotas = new TreeMap<>();
            get(admin.describeClientQuotas(ClientQuotaFilter.all()).entities()).forEach(
                (entity, values) -> quotas.put(String.valueOf(new TreeMap<>(entity.entries())), new TreeMap<>(values)));
            return quotas;
        });

        // --- producers and transactions ---
        long[] producer = new long[2];   // the open transaction's producer id and epoch, for abortTransaction
        step("describeProducers", () -> {
            Map<String, Object> found = new TreeMap<>();
            for (var e : get(admin.describeProducers(partitions).all()).entrySet()) {
                List<Object> producers = new ArrayList<>();
                for (ProducerState p : e.getValue().activeProducers()) {
                    producers.add(map("producerId", p.producerId(), "producerEpoch", p.producerEpoch(),
                                      "lastSequence", p.lastSequence(),
                                      "currentTransactionStartOffset", p.currentTransactionStartOffset().isPresent()
                                          ? p.currentTransactionStartOffset().getAsLong() : null));
                }
                found.put(String.valueOf(e.getKey().partition()), producers);
            }
            return found;
        });
        step("listTransactions", () -> {
            Map<String, Object> found = new TreeMap<>();
            for (TransactionListing t : get(admin.listTransactions().all())) {
                found.put(t.transactionalId(), map("producerId", t.producerId(), "state", t.state()));
            }
            return found;
        });
        step("describeTransactions", () -> {
            TransactionDescription t = get(admin.describeTransactions(List.of(name("txn"))).description(name("txn")));
            producer[0] = t.producerId();
            producer[1] = t.producerEpoch();
            return map("state", t.state(), "producerId", t.producerId(), "producerEpoch", t.producerEpoch(),
                       "coordinatorId", t.coordinatorId(), "timeoutMs", t.transactionTimeoutMs(),
                       "topicPartitions", t.topicPartitions().stream().map(Object::toString).sorted().toList());
        });
        step("abortTransaction", () -> {
            get(admin.abortTransaction(new AbortTransactionSpec(first, producer[0], (short) producer[1], 0)).all());
            return "aborted";
        });
        step("fenceProducers", () -> {
            get(admin.fenceProducers(List.of(name("txn"))).all());
            return List.of(name("txn"));
        });
        step("forceTerminateTransaction", () -> {
            get(admin.forceTerminateTransaction(name("txn")).result());
            return "terminated";
        });

        // --- what a single broker without KRaft does not serve ---
        step("electLeaders", () -> get(admin.electLeaders(ElectionType.PREFERRED, Set.of(first)).partitions()).keySet()
            .stream().map(Object::toString).toList());
        step("alterPartitionReassignments", () -> {
            get(admin.alterPartitionReassignments(Map.of(first, Optional.of(new NewPartitionReassignment(List.of(node))))).all());
            return "reassigned";
        });
        step("listPartitionReassignments", () -> get(admin.listPartitionReassignments().reassignments()).keySet()
            .stream().map(Object::toString).toList());
        step("alterReplicaLogDirs", () -> {
            get(admin.alterReplicaLogDirs(Map.of(new TopicPartitionReplica(topic, 0, node), "/tmp/elsewhere")).all());
            return "moved";
        });
        step("describeMetadataQuorum", () -> get(admin.describeMetadataQuorum().quorumInfo()).leaderId());
        step("listConfigResources", () -> get(admin.listConfigResources().all()).stream().map(Object::toString).toList());
        step("updateFeatures", () -> {
            var update = new FeatureUpdate((short) 1, FeatureUpdate.UpgradeType.UPGRADE);
            get(admin.updateFeatures(Map.of("group.version", update), new UpdateFeaturesOptions().validateOnly(true)).all());
            return "updated";
        });
        step("unregisterBroker", () -> {
            get(admin.unregisterBroker(node + 1).all());
            return "unregistered";
        });
        step("createDelegationToken", () -> get(admin.createDelegationToken().delegationToken()).tokenInfo().tokenId());
        step("describeDelegationToken", () -> get(admin.describeDelegationToken().delegationTokens()).size());
        step("describeStreamsGroups", () -> get(admin.describeStreamsGroups(List.of(name("consumer"))).all()).keySet());

        step("deleteTopics", () -> {
            get(admin.deleteTopics(List.of(doomedTopic)).all());
            return List.of(doomedTopic);
        });
    }

    private static AlterConfigOp set(String name, String value) {
        return new AlterConfigOp(new ConfigEntry(name, value), AlterConfigOp.OpType.SET);
    }

    private static String value(Config config, String name) {
        ConfigEntry entry = config.get(name);
        return entry == null ? null : entry.value();
    }

    private static List<Object> members(Collection<MemberDescription> members) {
        List<Object> out = new ArrayList<>();
        for (MemberDescription m : members) {
            out.add(map("memberId", m.consumerId(), "instanceId", m.groupInstanceId().orElse(null),
                        "clientId", m.clientId(), "memberEpoch", m.memberEpoch().orElse(null),
                        "assignment", m.assignment().topicPartitions().stream().map(Object::toString).sorted().toList(),
                        "targetAssignment", m.targetAssignment()
                            .map(a -> a.topicPartitions().stream().map(Object::toString).sorted().toList()).orElse(null)));
        }
        return out;
    }

    private static Map<String, Object> offsets(Map<TopicPartition, OffsetAndMetadata> offsets) {
        Map<String, Object> out = new TreeMap<>();
        offsets.forEach((tp, o) -> out.put(tp.toString(), o == null ? null : o.offset()));
        return out;
    }

    private static List<Object> acls(Collection<AclBinding> bindings) {
        return bindings.stream().map(b -> (Object) map(
            "resourceType", b.pattern().resourceType(), "name", b.pattern().name(), "patternType", b.pattern().patternType(),
            "principal", b.entry().principal(), "host", b.entry().host(), "operation", b.entry().operation(),
            "permission", b.entry().permissionType())).sorted((a, b) -> a.toString().compareTo(b.toString())).toList();
    }

    /** An ordered map from alternating keys and values. */
    private static Map<String, Object> map(Object... pairs) {
        Map<String, Object> out = new LinkedHashMap<>();
        for (int i = 0; i < pairs.length; i += 2) {
            out.put((String) pairs[i], pairs[i + 1]);
        }
        return out;
    }
}

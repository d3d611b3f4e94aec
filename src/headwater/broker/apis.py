"""The Kafka APIs the broker serves, every API listed here with its handler and its authorization rule.

``ENDPOINTS`` is the one table: the server dispatches on it, every request passes its row's
rule before its row's handler, and ApiVersions advertises exactly what it holds. Adding an API
means writing its handler (the contract is ``headwater.broker.endpoint.Handler``) in the
``<family>_apis`` module beside the state it serves, and adding one row below; its rule is built
from ``security.authorization``'s pieces, written in the row or, when longer, beside the handler.
"""
from __future__ import annotations

from headwater.broker import (config_apis, cluster_apis, fetch_apis, log_admin_apis, offset_apis, partition_apis,
                              produce_apis, quota_apis, topic_apis, version_apis)
from headwater.broker.endpoint import Endpoint, endpoint
from headwater.broker.groups import admin_apis, commit_apis, consumer_group_apis, membership_apis
from headwater.broker.security import acl_apis, sasl_apis, user_apis
from headwater.broker.share import share_group_apis, start_offset_apis
from headwater.broker.txn import transaction_apis
from headwater.broker.security.acl_operations import AclOperation as Op
from headwater.broker.security.authorization import (anyone, cluster, described_groups, group, group_heartbeat,
                                                     transaction, transactional_group)
from headwater.protocol.consumer_group_messages import ConsumerGroupDescribeResponse
from headwater.protocol.messages import Api, ApiKey
from headwater.protocol.share_messages import ShareGroupDescribeResponse

ADVERTISED: dict[int, Api] = {}  # filled from ENDPOINTS below: what ApiVersions answers

ENDPOINTS: dict[int, Endpoint] = {e.api.key: e for e in (
    endpoint(ApiKey.PRODUCE, 3, 8, produce_apis.produce, produce_apis.produce_rule),
    endpoint(ApiKey.FETCH, 4, 11, fetch_apis.fetch, fetch_apis.fetch_rule),
    endpoint(ApiKey.LIST_OFFSETS, 1, 7, offset_apis.list_offsets, offset_apis.list_offsets_rule),
    endpoint(ApiKey.METADATA, 1, 13, topic_apis.metadata, topic_apis.metadata_rule),
    # v9 and v8/v9 are what Java's consumer needs in a consumer group (KIP-848); v10 names topics by id
    endpoint(ApiKey.OFFSET_COMMIT, 2, 9, commit_apis.offset_commit, commit_apis.offset_commit_rule),
    endpoint(ApiKey.OFFSET_FETCH, 1, 9, commit_apis.offset_fetch, commit_apis.offset_fetch_rule),
    endpoint(ApiKey.FIND_COORDINATOR, 0, 2, membership_apis.find_coordinator, membership_apis.find_coordinator_rule),
    endpoint(ApiKey.JOIN_GROUP, 0, 5, membership_apis.join_group, group(Op.READ)),
    endpoint(ApiKey.HEARTBEAT, 0, 3, membership_apis.heartbeat, group(Op.READ)),
    endpoint(ApiKey.LEAVE_GROUP, 0, 3, membership_apis.leave_group, group(Op.READ)),
    endpoint(ApiKey.SYNC_GROUP, 0, 3, membership_apis.sync_group, group(Op.READ)),
    endpoint(ApiKey.DESCRIBE_GROUPS, 0, 5, admin_apis.describe_groups, admin_apis.describe_groups_rule),
    endpoint(ApiKey.LIST_GROUPS, 0, 5, admin_apis.list_groups, admin_apis.list_groups_rule),
    # v0 is advertised because librdkafka needs it listed to use SASL; clients then pick v1 (KIP-152)
    endpoint(ApiKey.SASL_HANDSHAKE, 0, 1, sasl_apis.sasl_handshake, anyone),
    endpoint(ApiKey.API_VERSIONS, 0, 4, version_apis.ApiVersions(ADVERTISED), anyone),
    endpoint(ApiKey.CREATE_TOPICS, 2, 7, topic_apis.create_topics, topic_apis.create_topics_rule),
    endpoint(ApiKey.DELETE_TOPICS, 0, 3, topic_apis.delete_topics, topic_apis.delete_topics_rule),
    endpoint(ApiKey.DELETE_RECORDS, 0, 2, log_admin_apis.delete_records, log_admin_apis.delete_records_rule),
    endpoint(ApiKey.INIT_PRODUCER_ID, 0, 4, produce_apis.init_producer_id, produce_apis.init_producer_id_rule),
    endpoint(ApiKey.OFFSET_FOR_LEADER_EPOCH, 0, 3, offset_apis.offset_for_leader_epoch,
             offset_apis.offset_for_leader_epoch_rule),
    endpoint(ApiKey.DESCRIBE_ACLS, 1, 3, acl_apis.describe_acls, cluster(Op.DESCRIBE)),
    endpoint(ApiKey.CREATE_ACLS, 1, 3, acl_apis.create_acls, acl_apis.create_acls_rule),
    endpoint(ApiKey.DELETE_ACLS, 1, 3, acl_apis.delete_acls, acl_apis.delete_acls_rule),
    endpoint(ApiKey.DESCRIBE_CONFIGS, 1, 4, config_apis.describe_configs, config_apis.describe_configs_rule),
    endpoint(ApiKey.ALTER_CONFIGS, 0, 2, config_apis.alter_configs, config_apis.alter_configs_rule),
    endpoint(ApiKey.DESCRIBE_LOG_DIRS, 1, 4, log_admin_apis.describe_log_dirs, cluster(Op.DESCRIBE)),
    endpoint(ApiKey.SASL_AUTHENTICATE, 0, 2, sasl_apis.sasl_authenticate, anyone),
    endpoint(ApiKey.DELETE_GROUPS, 0, 2, admin_apis.delete_groups, admin_apis.delete_groups_rule),
    endpoint(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, 1, config_apis.incremental_alter_configs,
             config_apis.incremental_alter_configs_rule),
    endpoint(ApiKey.ADD_PARTITIONS_TO_TXN, 0, 3, transaction_apis.add_partitions_to_txn,
             transaction_apis.add_partitions_to_txn_rule),
    endpoint(ApiKey.ADD_OFFSETS_TO_TXN, 0, 3, transaction_apis.add_offsets_to_txn, transaction(transactional_group)),
    endpoint(ApiKey.END_TXN, 0, 3, transaction_apis.end_txn, transaction()),
    endpoint(ApiKey.WRITE_TXN_MARKERS, 1, 2, transaction_apis.write_txn_markers,
             transaction_apis.write_txn_markers_rule),  # Kafka 4 dropped v0 (KIP-896)
    endpoint(ApiKey.TXN_OFFSET_COMMIT, 0, 3, transaction_apis.txn_offset_commit,
             transaction_apis.txn_offset_commit_rule),
    endpoint(ApiKey.DESCRIBE_TRANSACTIONS, 0, 0, transaction_apis.describe_transactions,
             transaction_apis.describe_transactions_rule),
    endpoint(ApiKey.LIST_TRANSACTIONS, 0, 1, transaction_apis.list_transactions,
             transaction_apis.list_transactions_rule),
    endpoint(ApiKey.CREATE_PARTITIONS, 0, 3, partition_apis.create_partitions, partition_apis.create_partitions_rule),
    endpoint(ApiKey.OFFSET_DELETE, 0, 0, commit_apis.offset_delete, commit_apis.offset_delete_rule),
    endpoint(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 0, user_apis.describe_user_scram_credentials,
             cluster(Op.DESCRIBE)),
    endpoint(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, 0, user_apis.alter_user_scram_credentials,
             user_apis.alter_user_scram_credentials_rule),
    endpoint(ApiKey.DESCRIBE_CLUSTER, 0, 2, cluster_apis.describe_cluster, anyone),  # as Kafka: Metadata lists brokers too
    endpoint(ApiKey.DESCRIBE_PRODUCERS, 0, 0, produce_apis.describe_producers, produce_apis.describe_producers_rule),
    endpoint(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, 0, partition_apis.describe_topic_partitions,
             partition_apis.describe_topic_partitions_rule),
    endpoint(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, 1, consumer_group_apis.consumer_group_heartbeat,
             group_heartbeat(Op.DESCRIBE)),
    endpoint(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, 1, consumer_group_apis.consumer_group_describe,
             described_groups(ConsumerGroupDescribeResponse.DescribedGroup)),
    endpoint(ApiKey.SHARE_GROUP_HEARTBEAT, 1, 1, share_group_apis.share_group_heartbeat, group_heartbeat(Op.READ)),
    endpoint(ApiKey.SHARE_GROUP_DESCRIBE, 1, 1, share_group_apis.share_group_describe,
             described_groups(ShareGroupDescribeResponse.DescribedGroup)),
    endpoint(ApiKey.SHARE_FETCH, 1, 1, share_group_apis.share_fetch, share_group_apis.share_fetch_rule),
    endpoint(ApiKey.SHARE_ACKNOWLEDGE, 1, 1, share_group_apis.share_acknowledge,
             share_group_apis.share_acknowledge_rule),
    endpoint(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0, 1, start_offset_apis.describe_share_group_offsets,
             start_offset_apis.describe_share_group_offsets_rule),
    endpoint(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, 0, start_offset_apis.alter_share_group_offsets,
             start_offset_apis.alter_share_group_offsets_rule),
    endpoint(ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, 0, start_offset_apis.delete_share_group_offsets,
             start_offset_apis.delete_share_group_offsets_rule),
    endpoint(ApiKey.DESCRIBE_CLIENT_QUOTAS, 0, 1, quota_apis.describe_client_quotas, cluster(Op.DESCRIBE_CONFIGS)),
    endpoint(ApiKey.ALTER_CLIENT_QUOTAS, 0, 1, quota_apis.alter_client_quotas, quota_apis.alter_client_quotas_rule),
)}
ADVERTISED.update((key, e.api) for key, e in ENDPOINTS.items())

__all__ = ["ADVERTISED", "ENDPOINTS", "Endpoint"]

"""The Kafka APIs the broker serves: one module per API family, every API listed here.

``ENDPOINTS`` is the one table: the server dispatches on it, and ApiVersions advertises
exactly what it holds. Adding an API means writing its handler (the contract is
``headwater.broker.endpoint.Handler``) and adding one line below. The group APIs live
beside the group coordinator, in ``broker/groups``; the transaction APIs in ``broker/txn``.
"""
from __future__ import annotations

from headwater.broker.apis import (api_versions, client_quotas, cluster, fetch, list_offsets, log_admin, partitions,
                                  produce, topic_configs, topics)
from headwater.broker.endpoint import Endpoint, endpoint
from headwater.broker.groups import admin as group_admin
from headwater.broker.groups import commits, consumer_group_apis, membership
from headwater.broker.security import acl_apis
from headwater.broker.security import apis as security
from headwater.broker.security import user_apis
from headwater.broker.txn import apis as txn
from headwater.broker.share import apis as share
from headwater.broker.share import offsets as share_offsets
from headwater.protocol.messages import Api, ApiKey

ADVERTISED: dict[int, Api] = {}  # filled from ENDPOINTS below: what ApiVersions answers

ENDPOINTS: dict[int, Endpoint] = {e.api.key: e for e in (
    endpoint(ApiKey.PRODUCE, 3, 8, produce.produce),
    endpoint(ApiKey.FETCH, 4, 11, fetch.fetch),
    endpoint(ApiKey.LIST_OFFSETS, 1, 5, list_offsets.list_offsets),
    endpoint(ApiKey.METADATA, 1, 13, topics.metadata),
    # v9 and v8/v9 are what Java's consumer needs in a consumer group (KIP-848); v10 names topics by id
    endpoint(ApiKey.OFFSET_COMMIT, 2, 9, commits.offset_commit),
    endpoint(ApiKey.OFFSET_FETCH, 1, 9, commits.offset_fetch),
    endpoint(ApiKey.FIND_COORDINATOR, 0, 2, membership.find_coordinator),
    endpoint(ApiKey.JOIN_GROUP, 0, 5, membership.join_group),
    endpoint(ApiKey.HEARTBEAT, 0, 3, membership.heartbeat),
    endpoint(ApiKey.LEAVE_GROUP, 0, 3, membership.leave_group),
    endpoint(ApiKey.SYNC_GROUP, 0, 3, membership.sync_group),
    endpoint(ApiKey.DESCRIBE_GROUPS, 0, 5, group_admin.describe_groups),
    endpoint(ApiKey.LIST_GROUPS, 0, 5, group_admin.list_groups),
    # v0 is advertised because librdkafka needs it listed to use SASL; clients then pick v1 (KIP-152)
    endpoint(ApiKey.SASL_HANDSHAKE, 0, 1, security.sasl_handshake),
    endpoint(ApiKey.API_VERSIONS, 0, 4, api_versions.ApiVersions(ADVERTISED)),
    endpoint(ApiKey.CREATE_TOPICS, 2, 4, topics.create_topics),
    endpoint(ApiKey.DELETE_TOPICS, 0, 3, topics.delete_topics),
    endpoint(ApiKey.DELETE_RECORDS, 0, 2, log_admin.delete_records),
    endpoint(ApiKey.INIT_PRODUCER_ID, 0, 4, produce.init_producer_id),
    endpoint(ApiKey.OFFSET_FOR_LEADER_EPOCH, 0, 3, list_offsets.offset_for_leader_epoch),
    endpoint(ApiKey.DESCRIBE_ACLS, 1, 3, acl_apis.describe_acls),
    endpoint(ApiKey.CREATE_ACLS, 1, 3, acl_apis.create_acls),
    endpoint(ApiKey.DELETE_ACLS, 1, 3, acl_apis.delete_acls),
    endpoint(ApiKey.DESCRIBE_CONFIGS, 1, 4, topic_configs.describe_configs),
    endpoint(ApiKey.ALTER_CONFIGS, 0, 2, topic_configs.alter_configs),
    endpoint(ApiKey.DESCRIBE_LOG_DIRS, 1, 4, log_admin.describe_log_dirs),
    endpoint(ApiKey.SASL_AUTHENTICATE, 0, 2, security.sasl_authenticate),
    endpoint(ApiKey.DELETE_GROUPS, 0, 2, group_admin.delete_groups),
    endpoint(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, 1, topic_configs.incremental_alter_configs),
    endpoint(ApiKey.ADD_PARTITIONS_TO_TXN, 0, 3, txn.add_partitions_to_txn),
    endpoint(ApiKey.ADD_OFFSETS_TO_TXN, 0, 3, txn.add_offsets_to_txn),
    endpoint(ApiKey.END_TXN, 0, 3, txn.end_txn),
    endpoint(ApiKey.WRITE_TXN_MARKERS, 1, 2, txn.write_txn_markers),  # Kafka 4 dropped v0 (KIP-896)
    endpoint(ApiKey.TXN_OFFSET_COMMIT, 0, 3, txn.txn_offset_commit),
    endpoint(ApiKey.DESCRIBE_TRANSACTIONS, 0, 0, txn.describe_transactions),
    endpoint(ApiKey.LIST_TRANSACTIONS, 0, 1, txn.list_transactions),
    endpoint(ApiKey.CREATE_PARTITIONS, 0, 3, partitions.create_partitions),
    endpoint(ApiKey.OFFSET_DELETE, 0, 0, commits.offset_delete),
    endpoint(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 0, user_apis.describe_user_scram_credentials),
    endpoint(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, 0, user_apis.alter_user_scram_credentials),
    endpoint(ApiKey.DESCRIBE_CLUSTER, 0, 2, cluster.describe_cluster),
    endpoint(ApiKey.DESCRIBE_PRODUCERS, 0, 0, produce.describe_producers),
    endpoint(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, 0, partitions.describe_topic_partitions),
    endpoint(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, 1, consumer_group_apis.consumer_group_heartbeat),
    endpoint(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, 1, consumer_group_apis.consumer_group_describe),
    endpoint(ApiKey.SHARE_GROUP_HEARTBEAT, 1, 1, share.share_group_heartbeat),
    endpoint(ApiKey.SHARE_GROUP_DESCRIBE, 1, 1, share.share_group_describe),
    endpoint(ApiKey.SHARE_FETCH, 1, 1, share.share_fetch),
    endpoint(ApiKey.SHARE_ACKNOWLEDGE, 1, 1, share.share_acknowledge),
    endpoint(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0, 1, share_offsets.describe_share_group_offsets),
    endpoint(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, 0, share_offsets.alter_share_group_offsets),
    endpoint(ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, 0, share_offsets.delete_share_group_offsets),
    endpoint(ApiKey.DESCRIBE_CLIENT_QUOTAS, 0, 1, client_quotas.describe_client_quotas),
    endpoint(ApiKey.ALTER_CLIENT_QUOTAS, 0, 1, client_quotas.alter_client_quotas),
)}
ADVERTISED.update((key, e.api) for key, e in ENDPOINTS.items())

__all__ = ["ADVERTISED", "ENDPOINTS", "Endpoint"]

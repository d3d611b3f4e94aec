"""The broker's wiring: its data directory, and the parts that hold its state (logs, the append
path, coordinators, who is waiting for data), each given what it needs."""
from __future__ import annotations

import fcntl
import uuid
from pathlib import Path

from headwater.broker.appender import INTERNAL_TOPICS, Appender
from headwater.broker.clock import Clock, LoopClock
from headwater.broker.config import BrokerConfig
from headwater.broker.dynamic_config import DynamicBrokerConfigs
from headwater.broker.fetch_sessions import FetchSessionCache
from headwater.broker.groups.consumer_group import ConsumerGroupCoordinator
from headwater.broker.groups.consumer_group_store import ConsumerGroupStore
from headwater.broker.groups.coordinator import GroupCoordinator
from headwater.broker.groups.store import GroupStore
from headwater.broker.wakeups import GrowthSignals
from headwater.broker.share.coordinator import ShareCoordinator
from headwater.broker.share.dead_letters import DeadLetterWriter
from headwater.broker.share.store import ShareStateStore
from headwater.broker.producer_state import ProducerIds
from headwater.broker.security.acls import AclStore, Authorizer
from headwater.broker.security.credentials import CredentialStore
from headwater.broker.stats import BrokerStats
from headwater.broker.quotas import ClientQuotas
from headwater.broker.txn.coordinator import TransactionCoordinator
from headwater.broker.txn.partitions import TxnPartitions
from headwater.broker.txn.store import TransactionStore
from headwater.log.layout import replace_atomically
from headwater.log import LogConfig, LogManager


class DataDirInUse(Exception):
    pass


class Broker:
    def __init__(self, config: BrokerConfig, log_defaults: LogConfig | None = None, clock: Clock | None = None):
        self.config = config
        config.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock = self._lock_data_dir(config.data_dir)
        # the topic defaults the broker started with, under what AlterConfigs set on the broker resource
        self.static_log_defaults = log_defaults or LogConfig.from_topic_configs(config.topic_defaults, LogConfig())
        self.dynamic_configs = DynamicBrokerConfigs(config.data_dir)
        self.log_manager = LogManager(config.data_dir, self.dynamic_configs.topic_defaults(self.static_log_defaults),
                                      config.max_partitions, config.flush_offset_checkpoint_interval_ms)
        self.cluster_id = self._load_cluster_id(config.data_dir)
        self.producer_ids = ProducerIds(config.data_dir)
        self.credentials = CredentialStore(config.data_dir)  # SASL users, re-read when `headwater users` changes them
        self.authorizer = Authorizer(AclStore(config.data_dir), config.super_users)
        self.wakeups = GrowthSignals()
        self.stats = BrokerStats()
        self.quotas = ClientQuotas(config.data_dir / "client-quotas.json")
        self.txn_partitions = TxnPartitions(self.log_manager, self.wakeups, fsync_markers=config.flush == "always")
        self.appender = Appender(config, self.log_manager, self.txn_partitions, self.wakeups, self.stats)
        # Replays __consumer_offsets: groups and offsets are back.
        clock = clock or LoopClock()
        offsets = GroupStore(self.appender, clock)
        self.groups = GroupCoordinator(offsets, clock, config.group_initial_rebalance_delay_ms)
        # KIP-848 consumer groups: their records handed over by that replay; offsets through self.groups
        self.consumer_groups = ConsumerGroupCoordinator(
            clock, ConsumerGroupStore(offsets), self._subscribable_topics,
            taken=lambda g: bool(self.groups.describe(g).members) or g in self.share.groups,
            session_timeout_ms=config.group_consumer_session_timeout_ms,
            heartbeat_interval_ms=config.group_consumer_heartbeat_interval_ms,
            max_size=config.group_consumer_max_size)
        # Replays __transaction_state: decided transactions are finished, open ones aborted.
        self.transactions = TransactionCoordinator(TransactionStore(self.appender, clock), clock, self.txn_partitions,
                                                   self.producer_ids.allocate, self.groups)
        self.share = ShareCoordinator(self.log_manager, clock,
                                      dead_letter=DeadLetterWriter(self.appender, lambda g: self.share.group(g).config),
                                      is_classic_group=lambda g: (self.groups.describe(g).state.value != "Dead"
                                                                 or self.consumer_groups.has_members(g)),
                                      wake=self.wakeups.notify,
                                      store=ShareStateStore(self.appender, clock))
        self.fetch_sessions = FetchSessionCache(clock, config.fetch_session_cache_slots,  # KIP-227, in memory
                                                max_size=config.max_partitions, signals=self.wakeups)

    def _subscribable_topics(self) -> dict[str, int]:
        """Topic -> partition count of the topics consumer groups may subscribe to (not the internal ones)."""
        return {name: len(t.partitions) for name, t in self.log_manager.topics.items() if name not in INTERNAL_TOPICS}

    @staticmethod
    def _lock_data_dir(data_dir: Path):
        """Two brokers on one data directory would interleave their writes: refuse the second."""
        lock = open(data_dir / ".lock", "w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise DataDirInUse(f"data directory {data_dir} is in use by another broker") from None
        return lock

    @staticmethod
    def _load_cluster_id(data_dir: Path) -> str:
        path = data_dir / "cluster-id"
        cluster_id = path.read_text().strip() if path.exists() else ""
        if not cluster_id:  # a new directory, or one whose first start found the disk full
            cluster_id = uuid.uuid4().hex[:22]
            replace_atomically(path, cluster_id)
        return cluster_id

    def delete_topic(self, name: str) -> None:
        self.log_manager.delete_topic(name)
        self.wakeups.forget_topic(name)
        self.txn_partitions.forget_topic(name)
        self.stats.forget_topic(name)
        self.share.forget_topic(name)
        self.appender.forget_topic(name)

    def close(self) -> None:
        self.appender.close()
        self.log_manager.close()
        self._lock.close()

"""The broker's parts wired as ``broker.Broker`` wires them, without a Broker (no data-directory
lock, no other coordinators): the append path over a LogManager in a test's directory, and a
coordinator over it, so a unit test builds only what it steps."""
from __future__ import annotations

from pathlib import Path

from headwater.broker.appender import Appender
from headwater.broker.clock import Clock
from headwater.broker.config import BrokerConfig
from headwater.broker.groups.consumer_group import ConsumerGroupCoordinator
from headwater.broker.groups.consumer_group_store import ConsumerGroupStore
from headwater.broker.groups.coordinator import GroupCoordinator
from headwater.broker.groups.store import GroupStore
from headwater.broker.wakeups import GrowthSignals
from headwater.broker.stats import BrokerStats
from headwater.broker.txn.partitions import TxnPartitions
from headwater.log import LogManager


def open_appender(data_dir: Path, flush: str = "never") -> Appender:
    logs = LogManager(data_dir)
    growth = GrowthSignals()
    return Appender(BrokerConfig(data_dir=data_dir, flush=flush), logs,
                    TxnPartitions(logs, growth, fsync_markers=flush == "always"), growth, BrokerStats())


def close_appender(appender: Appender) -> None:
    """As a broker stops: the producers' snapshots written, then the logs closed."""
    appender.close()
    appender.log_manager.close()


def open_groups(appender: Appender, clock: Clock, initial_rebalance_delay_ms: int = 0) -> GroupCoordinator:
    """The group coordinator, replaying __consumer_offsets. No initial rebalance delay unless a
    test asks for one, as in Kafka's own tests."""
    return GroupCoordinator(GroupStore(appender, clock), clock, initial_rebalance_delay_ms)


def open_consumer_groups(appender: Appender, clock: Clock, topics: dict[str, int], **options) -> ConsumerGroupCoordinator:
    """KIP-848's coordinator over ``topics`` (name -> partition count), replaying __consumer_offsets;
    the group id "classic" stands for one taken by a classic group."""
    return ConsumerGroupCoordinator(clock, ConsumerGroupStore(GroupStore(appender, clock)), lambda: topics,
                                    taken=lambda g: g == "classic", **options)

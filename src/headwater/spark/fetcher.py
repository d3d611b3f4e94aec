"""Fetch requests for one partition at a time, sent to its leader: the Spark source's
reader gets each response's record batches as bytes, for record_columns to turn into
Arrow columns, instead of a client library's object per record.

It speaks the Kafka protocol through the broker's own codec (headwater.protocol.request),
so it reads a Headwater broker or a Kafka cluster (2.3 or later: Fetch v11, Metadata
v8): leaders looked up by Metadata on any broker, connections kept per broker, and
the security properties librdkafka would take (TLS, SASL PLAIN and SCRAM).
"""

from __future__ import annotations

import ssl
import time

from headwater.protocol.errors import ErrorCode
from headwater.protocol.messages import MESSAGE_CLASSES, ApiKey
from headwater.protocol.request import Connection, security_properties

FetchRequest = MESSAGE_CLASSES[ApiKey.FETCH][0]
MetadataRequest = MESSAGE_CLASSES[ApiKey.METADATA][0]
FETCH_VERSION, METADATA_VERSION = 11, 8
READ_COMMITTED = 1
# Errors after which the partition's leader is looked up again and the fetch retried.
STALE_LEADER = {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE,
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.REQUEST_TIMED_OUT,
                ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.OFFSET_NOT_AVAILABLE}
RETRY_BACKOFF_S = (0.05, 1.0)  # first and longest pause between retries
THROTTLE_WAIT_MAX_MS = 1_000


class FetchError(RuntimeError):
    """A fetch that failed for good: an error the broker answered, or no leader in time."""


class Fetcher:
    """Fetches with one client's settings (the source's `kafka.*` options, in librdkafka's
    names: bootstrap.servers, client.id, isolation.level, max.partition.fetch.bytes,
    fetch.wait.max.ms, socket.timeout.ms and the security properties)."""

    def __init__(self, client: dict[str, str]):
        self.bootstrap = [address.strip() for address in client["bootstrap.servers"].split(",") if address.strip()]
        self.security = security_properties(client)
        self.client_id = client.get("client.id", "headwater-spark")
        # librdkafka's default, which the planner's ListOffsets (spark/cluster.py) also uses.
        self.isolation_level = 0 if client.get("isolation.level") == "read_uncommitted" else READ_COMMITTED
        self.partition_max_bytes = int(client.get("max.partition.fetch.bytes", 1 << 20))
        # A fetch at the end of the log waits this long at the broker for records to come.
        self.max_wait_ms = int(client.get("fetch.wait.max.ms", 10))
        self.timeout = int(client.get("socket.timeout.ms", 60_000)) / 1000
        self._connections: dict[str, Connection] = {}
        self._leaders: dict[tuple[str, int], str] = {}
        # A fetch sent ahead, whose answer is not read yet: (leader, topic, partition, offset).
        self._ahead: tuple[str, str, int, int] | None = None

    @property
    def idle(self) -> bool:
        """No answer is waiting on a connection: the fetcher may serve another range."""
        return self._ahead is None

    def close(self) -> None:
        self._ahead = None
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    def fetch(self, topic: str, partition: int, offset: int):
        """The fetch response's partition data (error_code, high_watermark,
        last_stable_offset, aborted_transactions, records) for records from `offset`.
        Leader changes and lost connections are retried until socket.timeout.ms;
        OFFSET_OUT_OF_RANGE is returned for the caller to judge."""
        deadline = time.monotonic() + self.timeout
        pause = RETRY_BACKOFF_S[0]
        while True:
            try:
                answer = self._fetch_from_leader(topic, partition, offset)
                if answer is None:  # throttled, and waited as told
                    if time.monotonic() > deadline:
                        raise FetchError(f"fetching {topic}-{partition}: throttled by the broker for longer "
                                         f"than socket.timeout.ms ({self.timeout:g} s)")
                    continue
                if answer.error_code not in STALE_LEADER:
                    if answer.error_code not in (ErrorCode.NONE, ErrorCode.OFFSET_OUT_OF_RANGE):
                        raise FetchError(f"fetching {topic}-{partition} at offset {offset}: "
                                         f"{_error_name(answer.error_code)}")
                    return answer
                problem = _error_name(answer.error_code)
            except ssl.SSLCertVerificationError:  # the broker's certificate will not change by retrying
                raise
            except OSError as exc:  # a broker went away: another may lead now
                problem = f"{type(exc).__name__}: {exc}"
                self._drop(self._leaders.get((topic, partition)))
            self._leaders.pop((topic, partition), None)
            if time.monotonic() + pause > deadline:
                raise FetchError(f"fetching {topic}-{partition} at offset {offset}: no answer from its leader "
                                 f"within socket.timeout.ms ({self.timeout:g} s); last: {problem}")
            time.sleep(pause)
            pause = min(2 * pause, RETRY_BACKOFF_S[1])

    def fetch_ahead(self, topic: str, partition: int, offset: int) -> None:
        """Send the fetch from `offset` now, so that the broker prepares it while the caller
        works; the next fetch() from that offset reads its answer."""
        leader = self._leaders.get((topic, partition))
        if leader is None or self._ahead is not None:
            return
        try:
            self._connection(leader).send(self._request(topic, partition, offset), FETCH_VERSION)
            self._ahead = (leader, topic, partition, offset)
        except OSError:
            self._drop(leader)  # fetch() finds out again, and retries

    def _fetch_from_leader(self, topic: str, partition: int, offset: int):
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead[1:] == (topic, partition, offset):
            leader = ahead[0]
            response = self._connections[leader].receive(ApiKey.FETCH, FETCH_VERSION)
        else:
            self._drop(ahead[0] if ahead else None)  # its connection holds an answer nobody will read
            leader = self._leaders.get((topic, partition)) or self._find_leader(topic, partition)
            response = self._connection(leader)(self._request(topic, partition, offset), FETCH_VERSION)
        if response.error_code:
            raise FetchError(f"fetching {topic}-{partition}: {_error_name(response.error_code)}")
        for answer in response.responses:
            for data in answer.partitions:
                if (answer.topic, data.partition_index) == (topic, partition):
                    return data
        # A throttled client is answered with no partitions (KIP-219): wait as told, then ask again.
        time.sleep(min(max(response.throttle_time_ms, 10), THROTTLE_WAIT_MAX_MS) / 1000)
        return None

    def _request(self, topic: str, partition: int, offset: int):
        return FetchRequest(
            replica_id=-1, max_wait_ms=self.max_wait_ms, min_bytes=1, max_bytes=self.partition_max_bytes,
            isolation_level=self.isolation_level, session_id=0, session_epoch=-1,  # no fetch session
            topics=[FetchRequest.FetchTopic(topic=topic, partitions=[FetchRequest.FetchTopic.FetchPartition(
                partition=partition, current_leader_epoch=-1, fetch_offset=offset, log_start_offset=-1,
                partition_max_bytes=self.partition_max_bytes)])],
            forgotten_topics_data=[], rack_id="")

    def _find_leader(self, topic: str, partition: int) -> str:
        """HOST:PORT of the partition's leader, from a Metadata request to any broker we
        already talk to, else to the bootstrap servers in turn."""
        request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                  allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                                  include_topic_authorized_operations=False)
        failures = []
        for address in [*self._connections, *self.bootstrap]:
            try:
                metadata = self._connection(address)(request, METADATA_VERSION)
                break
            except OSError as exc:
                self._drop(address)
                failures.append(f"{address}: {exc}")
        else:
            raise ConnectionError(f"no broker answered Metadata ({'; '.join(failures)})")
        brokers = {b.node_id: f"{b.host}:{b.port}" for b in metadata.brokers}
        for found in metadata.topics:
            for p in found.partitions:
                if p.leader_id in brokers:
                    self._leaders[(found.name, p.partition_index)] = brokers[p.leader_id]
        if (topic, partition) not in self._leaders:
            raise ConnectionError(f"no leader known for {topic}-{partition}")
        return self._leaders[(topic, partition)]

    def _connection(self, address: str) -> Connection:
        if address not in self._connections:
            self._connections[address] = Connection(address, self.timeout, self.client_id, self.security)
        return self._connections[address]

    def _drop(self, address: str | None) -> None:
        connection = self._connections.pop(address, None) if address else None
        if connection is not None:
            connection.close()


def _error_name(code: int) -> str:
    try:
        return f"{ErrorCode(code).name} ({code})"
    except ValueError:
        return f"error {code}"


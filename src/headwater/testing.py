"""Real servers as subprocesses (a Headwater broker, a throw-away PostgreSQL), bad batches
to send them, and the options every benchmark shares: for tests, the demo and benchmarks."""
from __future__ import annotations

import argparse
import atexit
import base64
import contextlib
import ctypes
import dataclasses
import functools
import glob
import itertools
import json
import os
import pwd
import resource
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
import weakref
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

import cramjam
import psycopg2

from headwater import records
from headwater.cli.ready_lines import BROKER_READY, CONSOLE_READY, LISTENER_READY
from headwater.records import layout


class BrokerProcess:
    """A `headwater broker` child process on an ephemeral loopback port."""

    def __init__(self, data_dir: Path, *extra_args: str, port: int = 0, log_file: Path | None = None,
                 open_files: int | None = None, source: Path | None = None, wrapper: Sequence[str] = ()):
        self.data_dir = Path(data_dir)
        self.wrapper = list(wrapper)   # a command the broker runs under (a bench's profiler: py-spy record ... --)
        self.source = source   # another tree's src/ to run the broker from (a bench's "before")
        self.extra_args = extra_args
        self.port = port
        self.open_files = open_files   # the broker's RLIMIT_NOFILE, when a test lowers it
        self.log_file = log_file or self.data_dir.with_name(self.data_dir.name + ".broker.log")
        self.proc: subprocess.Popen | None = None
        self.console_url: str | None = None  # http://host:port/ when started with --http-listener
        self.listeners: dict[str, int] = {}  # security protocol → port, when started with --listener

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 120) -> "BrokerProcess":
        # as Kafka's own test harness: no initial rebalance delay unless a test asks for one (its extra args
        # win); another tree's broker (a bench's "before") may not know the flag
        no_delay = ["--group-initial-rebalance-delay-ms", "0"] if self.source is None else []
        cmd = [*self.wrapper, sys.executable, "-m", "headwater", "broker", "--data-dir", str(self.data_dir),
               "--port", str(self.port), *no_delay, *self.extra_args]
        log = open(self.log_file, "ab")
        env = None if self.source is None else {**os.environ, "PYTHONPATH": str(self.source)}
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=env,
                                     preexec_fn=self._limit if self.open_files else None)
        log.close()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        while self.wrapper and line and not line.startswith(BROKER_READY):   # the wrapper's own words
            line = self.proc.stdout.readline()
        if not line.startswith(BROKER_READY):
            self.proc.kill()
            raise RuntimeError(f"broker did not start: {line!r}; see {self.log_file}:\n{self.log_file.read_text()[-2000:]}")
        self.port = int(line.rsplit(":", 1)[1])  # keep the port across restarts
        for _ in range(self.extra_args.count("--listener")):
            protocol, _, address = self.proc.stdout.readline().removeprefix(LISTENER_READY).partition("://")
            self.listeners[protocol] = int(address.rsplit(":", 1)[1])
        if "--http-listener" in self.extra_args:
            self.console_url = self.proc.stdout.readline().removeprefix(CONSOLE_READY).strip()
        return self

    def _limit(self) -> None:
        if self.open_files is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (self.open_files, self.open_files))

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM and wait: a clean shutdown. Returns the exit status."""
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        """SIGKILL: a crash, nothing flushed that was not already."""
        self.proc.kill()
        self.proc.wait()

    def rss_bytes(self) -> int:
        """The broker's resident memory now, from /proc (Linux)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError(f"no VmRSS for process {self.proc.pid}")

    def cpu_seconds(self) -> float:
        """User + system CPU time the broker process itself has used so far."""
        return cpu_seconds(self.proc.pid)

    def restart(self) -> "BrokerProcess":
        return self.start()

    def __enter__(self) -> "BrokerProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.stop()


def start_broker(data_dir: Path, *extra_args: str) -> BrokerProcess:
    return BrokerProcess(data_dir, *extra_args).start()


def _pg_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        raise RuntimeError("PostgreSQL server binaries not found; `make system-deps` installs them")
    return found[-1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    """One throw-away PostgreSQL cluster (initdb in a temp dir); `dsn` connects as superuser
    `postgres` over loopback TCP."""

    def __init__(self, wal_level: str = "logical"):
        self.dir = tempfile.mkdtemp(prefix="headwater-pg-")
        self.port = _free_port()
        self.dsn = f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"
        # PostgreSQL refuses to run as root: hand the directory to the `postgres` user.
        self._as_user: list[str] = []
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.dir, user.pw_uid, user.pw_gid)
            self._as_user = ["runuser", "-u", "postgres", "--"]
        data = os.path.join(self.dir, "data")
        self._run(_pg_bin("initdb"), "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        with open(os.path.join(data, "postgresql.conf"), "a") as conf:
            conf.write(
                f"listen_addresses = '127.0.0.1'\nport = {self.port}\n"
                f"unix_socket_directories = '{self.dir}'\nwal_level = {wal_level}\n"
                "max_replication_slots = 20\nmax_wal_senders = 20\n"
                "fsync = off\nshared_buffers = 32MB\n"
            )
        self.data = data
        self.start()

    def _run(self, *cmd: str) -> None:
        subprocess.run(self._as_user + list(cmd), check=True, stdout=subprocess.DEVNULL)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 30
        while True:
            try:
                psycopg2.connect(self.dsn).close()
                return
            except psycopg2.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def connect(self, autocommit: bool = True):
        conn = psycopg2.connect(self.dsn)
        conn.autocommit = autocommit
        return conn

    def execute(self, statement: str, params=None) -> list[tuple] | None:
        return sql(self.dsn, statement, params)

    def start(self) -> None:
        self._run(_pg_bin("pg_ctl"), "-D", self.data, "-l", os.path.join(self.dir, "log"), "-w", "start")
        self._wait_ready()

    def halt(self) -> None:
        """Immediate shutdown (no checkpoint, like a crash); `start` brings it back on the same port."""
        self._run(_pg_bin("pg_ctl"), "-D", self.data, "-m", "immediate", "-w", "stop")

    def crash_and_restart(self) -> None:
        self.halt()
        self.start()

    def stop(self) -> None:
        self.halt()
        shutil.rmtree(self.dir, ignore_errors=True)


def sql(dsn: str, statement: str, params=None) -> list[tuple] | None:
    """Run one statement in autocommit; its rows, or None."""
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(statement, params)
            return cur.fetchall() if cur.description else None
    finally:
        conn.close()


def proc_stat(pid: int) -> list[str]:
    """The fields of /proc/<pid>/stat after the command name (Linux), from 0: state, ppid, ...,
    utime 11, stime 12, cutime 13, cstime 14 (in clock ticks)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time process ``pid`` has used so far."""
    fields = proc_stat(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_arguments(parser: argparse.ArgumentParser, smoke: dict) -> argparse.Namespace:
    """Parse a benchmark's command line. `--smoke` swaps in the tiny sizes of `smoke` (options
    given explicitly still win): a run of a few seconds that proves the bench works and
    prints its table, with figures that mean nothing."""
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes, a few seconds: check that the bench runs (figures mean nothing)")
    args = parser.parse_args()
    if args.smoke:
        parser.set_defaults(**smoke)
        args = parser.parse_args()
    return args


def bench_workdir(prefix: str) -> Path:
    """A new temporary directory for a bench's brokers and checkpoints, removed when the bench's
    process exits (also after an error or Ctrl-C): a run leaves from MBs to GBs, and benches are
    run again and again."""
    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, workdir, ignore_errors=True)
    return workdir


def produce_all(producer, topic: str, values: Iterable[bytes | None], *, keys: Iterable | None = None,
                partitions: Iterable[int] | None = None, poll_every: int = 1000, **options) -> int:
    """Hand every value to a confluent-kafka ``producer``, in order, with ``keys`` and ``partitions``
    alongside when given (``options`` such as on_delivery go to every produce call). A full local
    queue (BufferError) is waited out by serving delivery reports, and they are served every
    ``poll_every`` messages; the caller flushes. Returns how many values were queued."""
    if keys is None and partitions is None:
        records = zip(values)   # the value alone: timed benches feed millions through here
    else:
        records = zip(values, itertools.repeat(None) if keys is None else keys,
                      itertools.repeat(-1) if partitions is None else partitions)   # -1: the partitioner's choice
    produce, queued = functools.partial(producer.produce, topic, **options), 0
    for record in records:
        while True:
            try:
                produce(*record)
                break
            except BufferError:
                producer.poll(0.01)
        queued += 1
        if queued % poll_every == 0:
            producer.poll(0)
    return queued


def wait_until(condition, timeout=60, interval=0.3, what="condition"):
    """Poll until `condition()` returns a truthy value, and return it; raise TimeoutError
    after `timeout` seconds. For background work (a rebalance, a cleaner pass, a
    connector) becoming visible."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def rebuilt_batch(batch: bytes, body: bytes | None = None, **fields) -> bytes:
    """``batch`` with another records section and/or header fields (BatchHeader's names), its
    length and CRC made right: a bad batch that only the log validator can refuse."""
    header = records.read_header(batch)
    body = batch[layout.HEADER_SIZE:] if body is None else body
    values = dataclasses.asdict(header) | {"batch_length": layout.MIN_BATCH_LENGTH + len(body)} | fields
    out = bytearray(layout.HEADER.pack(*values.values()) + body)
    layout.reseal_crc(out)
    return bytes(out)


def zstd_bomb(size: int) -> bytes:
    """A one-record batch whose zstd body decompresses to ``size`` zero bytes (a few KiB
    for 1 GiB); compressed a MiB at a time, so the zeros never exist whole."""
    compressor = cramjam.zstd.Compressor()
    for _ in range(size >> 20):
        compressor.compress(bytes(1 << 20))
    one = records.encode_batch([records.Record(0, 0, b"k", b"v")])
    return rebuilt_batch(one, bytes(compressor.finish()), attributes=int(records.Compression.ZSTD))


def _die_with_parent() -> None:
    """In a child before exec: SIGKILL it when the process that started it ends, even
    without cleaning up (a test run killed by its timeout), so no JVM is left behind."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG (Linux)


class SparkStandaloneCluster:
    """A Spark standalone cluster on loopback: a master and `workers` workers, each a JVM
    started with PySpark's own `bin/spark-class` on an ephemeral port, each worker with
    its own cores, memory and work directory, and its own process group (so `kill_worker`
    takes its executors and their Python workers with it). Logs go to `directory`."""

    def __init__(self, directory: Path, workers: int = 2, cores: int = 1, memory: str = "1g"):
        import pyspark

        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.spark_class = str(Path(pyspark.__file__).parent / "bin" / "spark-class")
        self.worker_args = ["--cores", str(cores), "--memory", memory]
        self.master_url = ""
        self.master: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen | None] = [None] * workers

    @staticmethod
    def driver_env() -> dict[str, str]:
        """The environment of a process on this cluster (a driver too): it listens on loopback, as
        the master and workers do (a driver with a cluster master binds the host's address)."""
        return {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}

    def _start(self, name: str, main_class: str, *args: str) -> subprocess.Popen:
        with open(self.directory / f"{name}.log", "ab") as log:
            return subprocess.Popen([self.spark_class, main_class, "--host", "127.0.0.1", "--port", "0",
                                     "--webui-port", "0", *args], stdout=log, stderr=subprocess.STDOUT,
                                    env=self.driver_env(),
                                    start_new_session=True, preexec_fn=_die_with_parent)

    def _await_log(self, name: str, marker: str, proc: subprocess.Popen, timeout: float = 120) -> str:
        """The first log line holding `marker`; fails with the log's tail if the JVM exits first."""
        def found():
            if proc.poll() is not None:
                raise RuntimeError(f"Spark {name} exited: {self.log_tail(name)}")
            return next((line for line in (self.directory / f"{name}.log").read_text().splitlines()
                         if marker in line), None)
        return wait_until(found, timeout=timeout, interval=0.2, what=f"Spark {name} ({marker!r})")

    def start(self) -> "SparkStandaloneCluster":
        self.master = self._start("master", "org.apache.spark.deploy.master.Master")
        line = self._await_log("master", "Starting Spark master at ", self.master)
        self.master_url = line.split("Starting Spark master at ", 1)[1].strip()
        for i in range(len(self.workers)):
            self.start_worker(i, wait=False)
        for i in range(len(self.workers)):
            self._await_log(f"worker-{i}", "Successfully registered with master", self.workers[i])
        return self

    def start_worker(self, i: int, wait: bool = True) -> None:
        work_dir = self.directory / f"worker-{i}"
        work_dir.mkdir(exist_ok=True)
        (self.directory / f"worker-{i}.log").unlink(missing_ok=True)
        self.workers[i] = self._start(f"worker-{i}", "org.apache.spark.deploy.worker.Worker", *self.worker_args,
                                      "--work-dir", str(work_dir), self.master_url)
        if wait:
            self._await_log(f"worker-{i}", "Successfully registered with master", self.workers[i])

    def kill_worker(self, i: int) -> None:
        """SIGKILL worker i with its executor and the executor's Python workers: a machine lost."""
        os.killpg(self.workers[i].pid, signal.SIGKILL)
        self.workers[i].wait()

    def log_tail(self, name: str | None = None, chars: int = 3000) -> str:
        """The end of one log (master, worker-N), or of every log and executor log."""
        paths = [self.directory / f"{name}.log"] if name else sorted(self.directory.rglob("*.log")) + \
            sorted(self.directory.rglob("stderr"))
        return "\n".join(f"--- {p}\n{p.read_text(errors='replace')[-chars:]}" for p in paths if p.exists())

    def stop(self) -> None:
        for proc in [*self.workers, self.master]:
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()

    def __enter__(self) -> "SparkStandaloneCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


@functools.cache
def _librdkafka() -> ctypes.CDLL:
    """The librdkafka that confluent-kafka's wheel bundles, typed for its mock cluster C API
    (confluent-kafka itself offers no call that creates a mock topic)."""
    import confluent_kafka

    pattern = str(Path(confluent_kafka.__file__).parent.parent / "confluent_kafka.libs" / "librdkafka*.so*")
    found = glob.glob(pattern)
    if not found:
        raise RuntimeError(f"no librdkafka at {pattern}: the mock cluster needs confluent-kafka's binary wheel")
    lib = ctypes.CDLL(found[0])
    pointer = ctypes.c_void_p
    lib.rd_kafka_conf_new.restype = pointer
    lib.rd_kafka_conf_set.argtypes = [pointer, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_new.restype = pointer
    lib.rd_kafka_new.argtypes = [ctypes.c_int, pointer, ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_destroy.argtypes = [pointer]
    lib.rd_kafka_mock_cluster_new.restype, lib.rd_kafka_mock_cluster_new.argtypes = pointer, [pointer, ctypes.c_int]
    lib.rd_kafka_mock_cluster_destroy.argtypes = [pointer]
    lib.rd_kafka_mock_cluster_bootstraps.restype = ctypes.c_char_p
    lib.rd_kafka_mock_cluster_bootstraps.argtypes = [pointer]
    lib.rd_kafka_mock_topic_create.argtypes = [pointer, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
    lib.rd_kafka_mock_partition_set_leader.argtypes = [pointer, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
    lib.rd_kafka_err2str.restype, lib.rd_kafka_err2str.argtypes = ctypes.c_char_p, [ctypes.c_int]
    return lib


def _destroy_mock(lib: ctypes.CDLL, cluster: int, handle: int) -> None:
    lib.rd_kafka_mock_cluster_destroy(cluster)
    lib.rd_kafka_destroy(handle)


class MockKafkaCluster:
    """librdkafka's mock cluster: `brokers` Kafka-protocol brokers (in C, inside this
    process, each on its own loopback port) that auto-create topics (4 partitions each, each
    led by a broker drawn at random); `topics` are created up front with the partitions given and
    their leaders dealt round-robin from broker 1, so a test can count on some partition led by a
    broker other than the bootstrap one. A second implementation of the protocol, for client-side code that must not assume
    one broker, and a peer for the benches. It lives as long as this object."""

    def __init__(self, brokers: int = 3, topics: dict[str, int] | None = None):
        lib = _librdkafka()
        conf, error = lib.rd_kafka_conf_new(), ctypes.create_string_buffer(512)
        lib.rd_kafka_conf_set(conf, b"log_level", b"0", error, len(error))
        handle = lib.rd_kafka_new(0, conf, error, len(error))   # 0: a producer, the mock's host handle
        if not handle:
            raise RuntimeError(f"cannot start librdkafka for a mock cluster: {error.value.decode()}")
        cluster = lib.rd_kafka_mock_cluster_new(handle, brokers)
        if not cluster:
            lib.rd_kafka_destroy(handle)
            raise RuntimeError(f"cannot start a mock cluster of {brokers} broker(s)")
        weakref.finalize(self, _destroy_mock, lib, cluster, handle)
        for name, partitions in (topics or {}).items():
            if partitions < 1:   # librdkafka asserts (aborting the process) on fewer
                raise ValueError(f"mock topic {name!r}: {partitions} partitions, it needs at least 1")
            code = lib.rd_kafka_mock_topic_create(cluster, name.encode(), partitions, 1)
            if code:
                raise RuntimeError(f"cannot create mock topic {name!r} with {partitions} partition(s): "
                                   f"{lib.rd_kafka_err2str(code).decode()}")
            # One call per partition, each a round trip to the mock's thread: with one broker it leads them all anyway.
            for partition in range(partitions if brokers > 1 else 0):
                lib.rd_kafka_mock_partition_set_leader(cluster, name.encode(), partition, partition % brokers + 1)
        # the mock numbers its brokers from 1 and lists them in that order
        addresses = lib.rd_kafka_mock_cluster_bootstraps(cluster).decode().split(",")
        self.brokers = dict(enumerate(addresses, 1))
        self._metadata = None

    @property
    def bootstrap(self) -> str:
        """One broker's address only: clients must find the others from Metadata."""
        return self.brokers[1]

    def leaders(self, topic: str) -> dict[int, int]:
        """partition -> the id of the broker leading it (creating the topic if needed)."""
        from confluent_kafka import Producer

        if self._metadata is None:   # a client only once asked: a bench measures the mock's process alone
            self._metadata = Producer({"bootstrap.servers": self.bootstrap, "log_level": 0})
        metadata = self._metadata.list_topics(topic, timeout=10).topics[topic]
        return {p: info.leader for p, info in metadata.partitions.items()}


@contextlib.contextmanager
def mock_cluster_process(topics: dict[str, int] | None = None) -> Iterator[tuple[int, str]]:
    """A one-broker MockKafkaCluster in a child process of its own, so that its CPU is measured
    apart from the clients': (its pid, its address) until the block ends."""
    script = ("import json, sys\nfrom headwater.testing import MockKafkaCluster\n"
              "mock = MockKafkaCluster(1, json.loads(sys.argv[1]))\n"
              "print(mock.bootstrap, flush=True)\nsys.stdin.read()")
    with subprocess.Popen([sys.executable, "-c", script, json.dumps(topics or {})], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as mock:
        try:
            address = mock.stdout.readline().strip()
            if not address:
                raise RuntimeError(f"the mock cluster process exited ({mock.wait()}) before it listened")
            yield mock.pid, address
        finally:
            mock.stdin.close()   # it exits when its stdin closes


# Apache Kafka's command-line tools: each bin/<name>.sh of the Kafka that jvm/pom.xml resolves
# (4.4) runs this main class. In 4.x kafka-acls and kafka-configs moved from kafka.admin to
# org.apache.kafka.tools.
KAFKA_TOOLS = {
    "kafka-acls": "org.apache.kafka.tools.AclCommand",
    "kafka-broker-api-versions": "org.apache.kafka.tools.BrokerApiVersionsCommand",
    "kafka-client-metrics": "org.apache.kafka.tools.ClientMetricsCommand",
    "kafka-cluster": "org.apache.kafka.tools.ClusterTool",
    "kafka-configs": "org.apache.kafka.tools.ConfigCommand",
    "kafka-console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-console-share-consumer": "org.apache.kafka.tools.consumer.ConsoleShareConsumer",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-consumer-perf-test": "org.apache.kafka.tools.ConsumerPerformance",
    "kafka-delegation-tokens": "org.apache.kafka.tools.DelegationTokenCommand",
    "kafka-delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-e2e-latency": "org.apache.kafka.tools.EndToEndLatency",
    "kafka-features": "org.apache.kafka.tools.FeatureCommand",
    "kafka-get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-groups": "org.apache.kafka.tools.GroupsCommand",
    "kafka-leader-election": "org.apache.kafka.tools.LeaderElectionCommand",
    "kafka-log-dirs": "org.apache.kafka.tools.LogDirsCommand",
    "kafka-metadata-quorum": "org.apache.kafka.tools.MetadataQuorumCommand",
    "kafka-producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "kafka-reassign-partitions": "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
    "kafka-replica-verification": "org.apache.kafka.tools.ReplicaVerificationTool",
    "kafka-share-consumer-perf-test": "org.apache.kafka.tools.ShareConsumerPerformance",
    "kafka-share-groups": "org.apache.kafka.tools.consumer.group.ShareGroupCommand",
    "kafka-streams-application-reset": "org.apache.kafka.tools.StreamsResetter",
    "kafka-streams-groups": "org.apache.kafka.tools.streams.StreamsGroupCommand",
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-transactions": "org.apache.kafka.tools.TransactionsCommand",
    "kafka-verifiable-consumer": "org.apache.kafka.tools.VerifiableConsumer",
    "kafka-verifiable-producer": "org.apache.kafka.tools.VerifiableProducer",
    "kafka-verifiable-share-consumer": "org.apache.kafka.tools.VerifiableShareConsumer",
}

# These end the JVM with System.exit and print their summary in its shutdown hooks: each runs in
# a JVM of its own.
_OWN_JVM = {"kafka-verifiable-consumer", "kafka-verifiable-producer", "kafka-verifiable-share-consumer"}

# Where `make jvm` puts the jars (the repository's build/, next to src/).
JVM_BUILD = Path(__file__).resolve().parents[2] / "build" / "jvm"
# Short-lived JVMs: the client compiler only and the serial collector start fastest on 2 cores.
_JVM_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


class ToolRun(NamedTuple):
    exit_code: int
    stdout: str
    stderr: str


def jvm_classpath(folder: str, jar: str) -> str:
    """The jars `make jvm` resolved into build/jvm/<folder>/ as one classpath; `jar` (a file
    name's start) must be among them."""
    path = JVM_BUILD / folder
    if not any(path.glob(f"{jar}*.jar")):
        raise FileNotFoundError(f"{path} has no {jar}: run `make jvm` (Maven and a JDK 17)")
    return f"{path}/*"


def kafka_classpath() -> str:
    """Kafka's jars and the project's own Java programs, as resolved by `make jvm`."""
    return jvm_classpath("kafka", "headwater-jvm-kafka")


def peer_command(folder: str, jar: str, main_class: str, *args: str) -> list[str]:
    """A bench's JVM peer (RabbitMQ's PerfTest, Debezium) on its build/jvm/<folder>/ classpath,
    with the JVM's default compilers and collector, as it runs in production (not the
    quick-start options of the short-lived test JVMs)."""
    return ["java", "-cp", jvm_classpath(folder, jar), main_class, *args]


def spark_kafka_jars() -> list[str]:
    """Spark's own Kafka connector and what PySpark lacks of its dependencies, as resolved by
    `make jvm`: for a session's spark.jars."""
    jars = sorted(str(jar) for jar in (JVM_BUILD / "spark-kafka").glob("*.jar"))
    if not any("spark-sql-kafka" in jar for jar in jars):
        raise FileNotFoundError(f"{JVM_BUILD / 'spark-kafka'} has no connector: run `make jvm` (Maven and a JDK 17)")
    return jars


def _main_class(tool: str) -> str:
    return tool if "." in tool else KAFKA_TOOLS[tool]


def _java_command(main_class: str, *args: str) -> list[str]:
    return ["java", *_JVM_OPTIONS, "-cp", kafka_classpath(), _main_class(main_class), *args]


def run_java(main_class: str, *args: str, input: str = "", timeout: float = 120) -> ToolRun:
    """A Java program (a Kafka tool's name from KAFKA_TOOLS, or a main class on Kafka's
    classpath) in a JVM of its own, to its end."""
    done = subprocess.run(_java_command(main_class, *args), input=input, capture_output=True, text=True,
                          timeout=timeout)
    return ToolRun(done.returncode, done.stdout, done.stderr)


def java_process(main_class: str, *args: str, log_file: Path) -> subprocess.Popen:
    """A long-running Java program (a Kafka Streams application) in a JVM of its own: its
    stdout a text pipe (lines to wait for), its stderr appended to `log_file`. The JVM dies with
    the process that started it; `kill()` is a crash."""
    with open(log_file, "ab") as log:
        return subprocess.Popen(_java_command(main_class, *args), stdout=subprocess.PIPE, stderr=log, text=True,
                                preexec_fn=_die_with_parent)


class KafkaTools:
    """One JVM running Kafka's tools one after another (jvm/.../Launcher.java), so a test
    module pays the JVM's start and class loading once: `run("kafka-topics", "--list", ...)`
    returns the tool's exit code, stdout and stderr. A tool that calls System.exit (argparse4j
    on bad arguments) ends that JVM, and the next run starts another; the verifiable clients,
    which print their summary as their JVM shuts down, get a JVM each.
    Stray output of a tool's leftover threads goes to `log_file`."""

    def __init__(self, log_file: Path | None = None):
        self.log_file = log_file
        self.proc: subprocess.Popen | None = None

    def start(self) -> "KafkaTools":
        log = open(self.log_file, "ab") if self.log_file else subprocess.DEVNULL
        self.proc = subprocess.Popen(_java_command("headwater.jvm.Launcher"),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                     preexec_fn=_die_with_parent)
        if self.log_file:
            log.close()
        return self

    def run(self, tool: str, *args: str, input: str = "", timeout: float = 120) -> ToolRun:
        if tool in _OWN_JVM:
            return run_java(tool, *args, input=input, timeout=timeout)
        if self.proc is None or self.proc.poll() is not None:
            self.start()   # the last tool ended the JVM with System.exit
        fields = [_main_class(tool), *args]
        if any(c in field for field in fields for c in "\t\n"):
            raise ValueError(f"an argument with a tab or a newline cannot be sent to the launcher: {fields}")
        stdin = input.encode()
        request = "\t".join([str(len(stdin)), *fields]) + "\n"
        self.proc.stdin.write(request.encode() + stdin)
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        header = b""
        while not header.endswith(b"\n"):
            header += self._read(1, deadline, tool)
        code, out, err = header.split(b"\t")
        stdout, stderr = self._read(int(out), deadline, tool).decode(), self._read(int(err), deadline, tool).decode()
        # "-": the tool called System.exit, whose status is the JVM's
        return ToolRun(self.proc.wait(timeout) if code == b"-" else int(code), stdout, stderr)

    def _read(self, size: int, deadline: float, tool: str) -> bytes:
        data = b""
        while len(data) < size:
            ready, _, _ = select.select([self.proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
            chunk = os.read(self.proc.stdout.fileno(), size - len(data)) if ready else b""
            if not chunk:
                self.close()
                raise RuntimeError(f"{tool}: the launcher JVM {'timed out' if not ready else 'exited'}"
                                   f" (see {self.log_file})")
            data += chunk
        return data

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:   # a tool's non-daemon threads keep it alive
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> "KafkaTools":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


# A server JVM that lives minutes on a shared 2-core machine: a small heap, and the same
# quick-starting compiler and collector as the tools.
_KAFKA_SERVER_OPTIONS = ("-Xms64m", "-Xmx256m", *_JVM_OPTIONS)
# What kafka-server-start.sh gives a node (its KAFKA_HEAP_OPTS and KAFKA_JVM_PERFORMANCE_OPTS):
# for benches that load one node with thousands of partitions, where the test heap runs out.
KAFKA_PRODUCTION_OPTIONS = ("-Xms1g", "-Xmx1g", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                            "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent")
_KAFKA_LOG4J = """\
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = OUT
logger.state.name = state.change.logger
logger.state.level = warn
"""


def _free_ports(count: int) -> list[int]:
    """`count` distinct free loopback ports (all held open together, so none comes back twice)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]


class KafkaCluster:
    """Apache Kafka from the jars `make jvm` resolves, in KRaft mode: `nodes` combined
    broker+controller JVMs on loopback ports (fixed for the cluster's life, so a node restarts
    where it was), replication factor min(3, nodes) for topics and the internal topics,
    min.insync.replicas 2 from three nodes on, share groups with dead-letter topics
    (share.version 2). Data and each node's log (`node<i>.log`) under `directory` (a temp dir
    by default, removed by `close`). Each node's JVM gets `jvm_options` (a small test heap by
    default; KAFKA_PRODUCTION_OPTIONS are Kafka's own)."""

    def __init__(self, nodes: int = 3, directory: Path | None = None,
                 jvm_options: tuple[str, ...] = _KAFKA_SERVER_OPTIONS):
        self.nodes = nodes
        self.jvm_options = jvm_options
        self._temporary = directory is None
        self.directory = Path(directory or tempfile.mkdtemp(prefix="headwater-kafka-"))
        ports = _free_ports(2 * nodes)
        self.ports, self.controller_ports = ports[:nodes], ports[nodes:]
        self.procs: list[subprocess.Popen | None] = [None] * nodes
        self._log_start = [0] * nodes   # where each node's log stood when it last started

    @property
    def bootstrap(self) -> str:
        """Every node's address, so a client finds the cluster with any one node down."""
        return ",".join(f"127.0.0.1:{port}" for port in self.ports)

    def _config(self, node: int) -> dict[str, object]:
        replicas, in_sync = min(3, self.nodes), 2 if self.nodes >= 3 else 1
        voters = ",".join(f"{i}@127.0.0.1:{port}" for i, port in enumerate(self.controller_ports))
        return {
            "process.roles": "broker,controller", "node.id": node, "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{self.ports[node]},CONTROLLER://127.0.0.1:{self.controller_ports[node]}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.ports[node]}",
            "controller.listener.names": "CONTROLLER", "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": self.directory / f"node{node}", "num.partitions": 3,
            "default.replication.factor": replicas, "min.insync.replicas": in_sync,
            # the internal topics: replicated like the rest, 3 partitions rather than 50 each (a fast start)
            **{f"{prefix}.replication.factor": replicas for prefix in
               ("offsets.topic", "transaction.state.log", "share.coordinator.state.topic")},
            **{f"{prefix}.min.isr": in_sync for prefix in ("transaction.state.log", "share.coordinator.state.topic")},
            **{f"{prefix}.num.partitions": 3 for prefix in
               ("offsets.topic", "transaction.state.log", "share.coordinator.state.topic")},
            "group.initial.rebalance.delay.ms": 0,   # as Headwater's test brokers
            "log.cleaner.dedupe.buffer.size": 16 << 20,   # 128 MiB by default: more than the heap
            # a killed node's partitions move after 3 s rather than 9
            "broker.session.timeout.ms": 3000, "broker.heartbeat.interval.ms": 1000,
        }

    def _java(self, node: int, main_class: str, *args: str) -> list[str]:
        return ["java", *self.jvm_options, f"-Dlog4j2.configurationFile={self.directory / 'log4j2.properties'}",
                "-cp", kafka_classpath(), main_class, *args]

    def start(self, timeout: float = 120) -> "KafkaCluster":
        self.directory.mkdir(parents=True, exist_ok=True)   # a directory given may not exist yet
        (self.directory / "log4j2.properties").write_text(_KAFKA_LOG4J)
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        for node in range(self.nodes):
            (self.directory / f"node{node}.properties").write_text(
                "".join(f"{key}={value}\n" for key, value in self._config(node).items()))
        formats = [subprocess.run(self._java(node, "kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}",   # an id may start with "-"
                                             "--config", str(self.directory / f"node{node}.properties"),
                                             "--feature", "share.version=2"),
                                  capture_output=True, text=True, timeout=timeout) for node in range(self.nodes)]
        for node, done in enumerate(formats):
            if done.returncode:
                raise RuntimeError(f"kafka-storage format of node {node} failed:\n{done.stdout}{done.stderr}")
        for node in range(self.nodes):
            self.start_node(node, wait=False)
        self._await_nodes(range(self.nodes), timeout)
        return self

    def start_node(self, node: int, wait: bool = True, timeout: float = 120) -> None:
        """Start node `node` (again, after `stop_node`); with `wait`, until it has caught up with the
        cluster's metadata and the controller has unfenced it."""
        log_path = self.directory / f"node{node}.log"
        self._log_start[node] = log_path.stat().st_size if log_path.exists() else 0
        with open(log_path, "ab") as log:
            self.procs[node] = subprocess.Popen(self._java(node, "kafka.Kafka", str(self.directory / f"node{node}.properties")),
                                                stdout=log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        if wait:
            self._await_nodes([node], timeout)

    def _await_nodes(self, nodes: Iterable[int], timeout: float) -> None:
        def started() -> bool:
            for node in nodes:
                if self.procs[node].poll() is not None:
                    raise RuntimeError(f"Kafka node {node} exited ({self.procs[node].returncode}):\n{self.log_tail(node)}")
            return all(self._started(node) for node in nodes)
        try:
            wait_until(started, timeout=timeout, interval=0.3, what=f"Kafka nodes {list(nodes)}")
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}:\n" + "\n".join(self.log_tail(node) for node in nodes)) from None

    def _started(self, node: int) -> bool:
        """The node's log says so since its last start (a broker logs it once unfenced)."""
        with open(self.directory / f"node{node}.log", "rb") as log:
            log.seek(self._log_start[node])
            return b"Kafka Server started" in log.read()

    def log_tail(self, node: int, chars: int = 3000) -> str:
        path = self.directory / f"node{node}.log"
        return f"--- {path}\n{path.read_text(errors='replace')[-chars:] if path.exists() else '(no log)'}"

    def stop_node(self, node: int, kill: bool = True, timeout: float = 60) -> None:
        """Stop node `node`: SIGKILL (a crash) by default, or SIGTERM and wait (a controlled shutdown)."""
        proc = self.procs[node]
        if proc is None or proc.poll() is not None:
            return
        if kill:
            proc.kill()
        else:
            proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    @contextlib.contextmanager
    def node_down(self, node: int) -> Iterator[None]:
        """Node `node` killed (SIGKILL) for the block, started again and waited for after it."""
        self.stop_node(node)
        try:
            yield
        finally:
            self.start_node(node)

    def close(self) -> None:
        """Every node stopped cleanly (all asked at once: the last ones need a quorum to leave in order).
        A node that lost the quorum meanwhile waits for an election that never comes: killed after 15 s."""
        for proc in self.procs:
            if proc is not None and proc.poll() is None:
                proc.terminate()
        for node in range(self.nodes):
            self.stop_node(node, kill=False, timeout=15)
        if self._temporary:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> "KafkaCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

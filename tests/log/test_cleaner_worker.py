"""The log cleaner's worker process under SIGKILL: of the worker (the broker carries on and a
later pass cleans the log) and of the broker (the worker dies with it; recovery). Each time
the replayed topic must equal the latest value per key computed in plain Python. The
broker's cleaner is throttled (log.cleaner.io.max.bytes.per.second) so a pass lasts long
enough to be caught with its .cleaned files on disk."""
from __future__ import annotations

import os
import re
import signal
from pathlib import Path

from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from headwater.testing import BrokerProcess, proc_stat, wait_until

from tests.support.logview import create_topic, produce_rounds, read_all
from tests.log.test_compaction import COMPACTED, as_view, latest_per_key, roll_with_marker

THROTTLED = ("--cleaner-interval-ms", "100", "--cleaner-io-max-bytes-per-second", "100000")
WORKER_STARTED = re.compile(r"log cleaner worker started \(pid (\d+)\)")


def fill(bootstrap: str, topic: str) -> list:
    """About 90 KB of updates to 40 keys, and two keys written once, in each 8 KB segment (so
    every rewrite keeps records), the last segment closed; then the whole backlog made
    cleanable at once (min.compaction.lag.ms to 0), so one throttled pass takes it all."""
    create_topic(bootstrap, topic, **{**COMPACTED, "segment.bytes": "8192", "min.compaction.lag.ms": "3600000"})
    rounds = [[(b"key-%d" % k, b"round %d of key %d " % (r, k) * 6) for k in range(40)]
              + [(b"once-%d-%d" % (r, k), b"only value") for k in range(2)] for r in range(20)]
    sent = produce_rounds(bootstrap, topic, rounds)
    sent += roll_with_marker(bootstrap, topic, "marker")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("min.compaction.lag.ms", "0", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    return sent


def cleaned_files(partition: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in partition.iterdir() if p.suffix == ".cleaned"}


def workers_started(proc: BrokerProcess) -> list[int]:
    return [int(pid) for pid in WORKER_STARTED.findall(proc.log_file.read_text())]


def alive(pid: int) -> bool:
    try:
        state = proc_stat(pid)[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_sigkill_of_the_worker_mid_clean_and_a_later_pass_cleans_the_log(start_broker):
    proc = start_broker(*THROTTLED)
    admin, broker = AdminClient({"bootstrap.servers": proc.bootstrap}), ConfigResource("broker", "0")
    configs = admin.describe_configs([broker])[broker].result(30)
    assert configs["log.cleaner.io.max.bytes.per.second"].value == "100000.0"
    sent = fill(proc.bootstrap, "accounts")
    wait_until(lambda: cleaned_files(proc.data_dir / "accounts-0"), what="a .cleaned rewrite", interval=0.005)
    worker = workers_started(proc)[-1]
    os.kill(worker, signal.SIGKILL)
    # The broker carries on: it takes writes, and the next pass (in a new worker) compacts the log.
    sent += produce_rounds(proc.bootstrap, "accounts", [[(b"key-1", b"after the kill")]])
    sent += roll_with_marker(proc.bootstrap, "accounts", "marker-2")
    expected = as_view(latest_per_key(sent))
    wait_until(lambda: read_all(proc.bootstrap, "accounts") == expected, what="the compacted view", timeout=120)
    log_text = proc.log_file.read_text()
    assert "ended while cleaning accounts-0 (exit code -9)" in log_text
    assert len(workers_started(proc)) >= 2 and not alive(worker)


def test_sigkill_of_the_broker_mid_clean_takes_the_worker_with_it_and_recovery_is_correct(start_broker):
    proc = start_broker(*THROTTLED)
    sent = fill(proc.bootstrap, "accounts")
    partition = proc.data_dir / "accounts-0"
    wait_until(lambda: cleaned_files(partition), what="a .cleaned rewrite", interval=0.005)
    proc.kill()
    rewrites = cleaned_files(partition)
    worker = workers_started(proc)[-1]
    wait_until(lambda: not alive(worker), what="the worker to die with the broker")
    # It died at once: an orphan would have gone on writing the rewrites of the other segments.
    assert cleaned_files(partition) == rewrites
    with BrokerProcess(proc.data_dir, "--cleaner-interval-ms", "100", log_file=proc.log_file) as restarted:
        replay = read_all(restarted.bootstrap, "accounts")
        offsets = [offset for offset, _, _ in replay]
        assert offsets == sorted(set(offsets)) and latest_per_key(replay) == latest_per_key(sent)
        expected = as_view(latest_per_key(sent))
        wait_until(lambda: read_all(restarted.bootstrap, "accounts") == expected, what="the compacted view")

"""`headwater broker`: bad arguments and conflicts are one clear line and a non-zero exit; SIGTERM is clean."""
import subprocess
import sys

from headwater.testing import BrokerProcess

from tests.support.clients import confluent_consume, confluent_produce


def headwater(*args, timeout=30):
    return subprocess.run([sys.executable, "-m", "headwater", *args], capture_output=True, text=True, timeout=timeout)


def test_bad_arguments(tmp_path):
    for args, words in ((["broker"], "--data-dir"),
                        (["broker", "--data-dir", str(tmp_path), "--port", "70000"], "--port"),
                        (["broker", "--data-dir", str(tmp_path), "--num-partitions", "0"], "--num-partitions"),
                        (["broker", "--data-dir", str(tmp_path), "--flush", "sometimes"], "--flush"),
                        (["broker", "--data-dir", str(tmp_path), "--failed-authentication-delay-ms", "-1"],
                         "--failed-authentication-delay-ms"),
                        (["broker", "--data-dir", str(tmp_path), "--http-listener", "ftp://127.0.0.1:0"],
                         "--http-listener: expected [http://|https://]HOST:PORT, got 'ftp://127.0.0.1:0'"),
                        (["broker", "--data-dir", str(tmp_path), "--port", "abc"],
                         "--port: expected a port from 0 to 65535, got 'abc'"),
                        (["nonsense"], "invalid choice")):
        result = headwater(*args)
        assert result.returncode == 2
        assert words in result.stderr
        assert "Traceback" not in result.stderr


def test_an_https_console_without_a_certificate_is_refused(tmp_path):
    result = headwater("broker", "--data-dir", str(tmp_path), "--http-listener", "https://127.0.0.1:0")
    assert result.returncode == 1
    assert "an https:// --http-listener needs a certificate and key" in result.stderr
    assert "Traceback" not in result.stderr


def test_second_broker_on_same_data_dir_or_port_is_refused(broker, tmp_path):
    same_dir = headwater("broker", "--data-dir", str(broker.data_dir), "--port", "0")
    assert same_dir.returncode == 1
    assert "in use by another broker" in same_dir.stderr and "Traceback" not in same_dir.stderr
    same_port = headwater("broker", "--data-dir", str(tmp_path / "other"), "--port", str(broker.port))
    assert same_port.returncode == 1
    assert f"cannot serve on 127.0.0.1:{broker.port}" in same_port.stderr and "Traceback" not in same_port.stderr


def test_sigterm_shuts_down_cleanly(tmp_path):
    proc = BrokerProcess(tmp_path / "data").start()
    confluent_produce(proc.bootstrap, "t", [(b"k", b"v", [])])
    assert proc.stop() == 0
    assert (tmp_path / "data" / "t-0" / ".clean-shutdown").exists()


def test_a_corrupt_file_in_the_data_dir_refuses_the_start_in_one_line_and_changes_nothing(tmp_path):
    data = tmp_path / "data"
    proc = BrokerProcess(data).start()
    sent = confluent_produce(proc.bootstrap, "t", [(b"k%d" % i, b"v%d" % i, []) for i in range(20)])
    assert proc.stop() == 0
    for name in ("catalog.json", "broker-configs.json", "client-quotas.json", "acls.json", "scram-credentials.json"):
        path = data / name
        before = path.read_bytes() if path.exists() else None
        path.write_bytes(b'{"topics": {"t": ')   # cut short, as by a full disk and a hand edit
        refused = headwater("broker", "--data-dir", str(data), "--port", "0")
        assert refused.returncode == 1, name
        assert refused.stderr.strip().splitlines() == [
            f"headwater: error: {path} is not valid JSON (Expecting value: line 1 column 18 (char 17)): "
            "restore it from a backup (nothing here guesses at what it held)"]
        assert path.read_bytes() == b'{"topics": {"t": '   # left as found, for the operator
        if before is None:
            path.unlink()
        else:
            path.write_bytes(before)
    proc = BrokerProcess(data).start()
    try:
        assert confluent_consume(proc.bootstrap, "t", [0], 20) == sent
    finally:
        proc.stop()


def test_the_console_is_imported_only_by_a_broker_that_serves_it():
    """`headwater broker` without --http-listener does not import the web console (aiohttp, the
    pages, the metrics' exposition): every start would pay for it."""
    imported = subprocess.run([sys.executable, "-c", "import sys, headwater.cli.broker; "
                               "print(sorted(m for m in sys.modules if m.startswith('headwater.http')))"],
                              capture_output=True, text=True, check=True)
    assert imported.stdout.strip() == "[]"

"""The data directory's file vocabulary: segment file names, and the one durable replace that
every small file (catalog, offset files, producer id block) goes through.

Whether a replace fsyncs its directory after the rename is observed with strace on a real
process: a crash right after an un-fsynced rename may bring the old file back.
"""
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

from headwater.broker.producer_state import ProducerIds
from headwater.log.layout import base_offset_of, replace_atomically, segment_base_offsets, segment_file

from tests.support.small_disk import fill_up, small_disk


def test_segment_file_names_sort_by_offset_and_parse_back(tmp_path):
    bases = [0, 7, 123_456_789, 2**63 - 1]
    for base in bases:
        path = segment_file(tmp_path, base, ".log")
        assert len(path.name) == 20 + len(".log") and path.name.startswith(str(base).rjust(20, "0"))
        assert base_offset_of(path) == base
        path.touch()
        segment_file(tmp_path, base, ".index").touch()
    for stray in ("5.log", "recovery-point", "00000000000000000009.log.swap", "notes.log", ".clean-shutdown"):
        (tmp_path / stray).touch()
    assert segment_base_offsets(tmp_path) == bases
    assert sorted(p.name for p in tmp_path.glob("*.log"))[:len(bases)] == [f"{b:020d}.log" for b in bases]
    assert base_offset_of(tmp_path / "recovery-point") is None


def test_replace_atomically_leaves_only_the_new_content(tmp_path):
    path = tmp_path / "recovery-point"
    replace_atomically(path, "41")
    replace_atomically(path, "42", durable=False)
    assert path.read_text() == "42"
    assert os.listdir(tmp_path) == ["recovery-point"]


def test_a_replace_that_fails_on_a_full_disk_keeps_the_old_content(tmp_path):
    with small_disk(tmp_path / "disk", "1m") as disk:
        ids = ProducerIds(disk)
        first = ids.allocate()
        block = (disk / "producer-id-block").read_text()
        ids._next = ids._limit  # the block is used up: the next id reserves a new one
        filler = fill_up(disk)
        with pytest.raises(OSError):
            ids.allocate()
        assert (disk / "producer-id-block").read_text() == block
        assert sorted(os.listdir(disk)) == ["filler", "producer-id-block"]
        filler.unlink()
        assert ProducerIds(disk).allocate() == int(block) > first


WRITERS = {
    "producer-id-block": """
        from headwater.broker.producer_state import ProducerIds
        ProducerIds(data).allocate()
    """,
    "catalog.json": """
        from headwater.log import LogManager
        LogManager(data).create_topic("t", 1)
    """,
    "t-0/log-start-offset": """
        from headwater.log import Log, LogConfig
        from headwater.records import Record, encode_batch
        log = Log.open(data / "t-0", LogConfig())
        log.append(bytearray(encode_batch([Record(0, 1, b"k", b"v"), Record(1, 2, b"k", b"v")])))
        log.delete_records_before(1)
    """,
}


@pytest.mark.skipif(not shutil.which("strace") and os.environ.get("CI") != "true", reason="needs strace")
@pytest.mark.parametrize("name", WRITERS)
def test_a_durable_replace_fsyncs_the_directory_after_the_rename(tmp_path, name):
    data, trace = tmp_path / "data", tmp_path / "trace"
    data.mkdir()
    script = f"from pathlib import Path\ndata = Path({str(data)!r})\n" + textwrap.dedent(WRITERS[name])
    subprocess.run(["strace", "-f", "-qq", "-o", str(trace), "-e", "trace=openat,fsync,rename,renameat,renameat2",
                    sys.executable, "-c", script], check=True, env=os.environ)
    target = data / name
    directory = str(target.parent)
    opened: dict[int, str] = {}   # descriptor -> path, as the trace goes
    renamed = False
    for line in trace.read_text().splitlines():
        if m := re.search(r'openat\(AT_FDCWD, "([^"]+)", [^)]*\)\s+= (\d+)', line):
            opened[int(m[2])] = m[1]
        elif re.search(rf'rename\w*\(.*"{re.escape(str(target))}\.tmp".*"{re.escape(str(target))}"', line):
            renamed = True
        elif renamed and (m := re.search(r"fsync\((\d+)\)\s+= 0", line)) and opened.get(int(m[1])) == directory:
            return
    pytest.fail(f"no fsync of {target.parent} after {name} was renamed into place (renamed: {renamed})")

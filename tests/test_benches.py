"""Every benchmark in bench/ still runs: `--smoke` (tiny sizes, a few seconds) exits 0 and
prints its table, and `--help` works. Figures are never asserted: this only keeps a bench
from breaking unnoticed. New benches are picked up by their file name alone."""
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

BENCH_DIR = Path(__file__).resolve().parent.parent / "bench"
# A bench is a script; bench/ also holds modules the benches share (tables.py).
BENCHES = sorted(path for path in BENCH_DIR.glob("*.py") if 'if __name__ == "__main__":' in path.read_text())


def run(bench: Path, *args: str, timeout: float, tmpdir: Path | None = None) -> subprocess.CompletedProcess:
    env = None if tmpdir is None else {**os.environ, "TMPDIR": str(tmpdir)}
    return subprocess.run([sys.executable, str(bench), *args], capture_output=True, text=True, timeout=timeout,
                          cwd=BENCH_DIR.parent, env=env)


def table_rows(text: str) -> list[list[str]]:
    """The lines of a bench's output laid out as table rows: rich's boxed rows and header,
    or plain columns set apart by two or more spaces."""
    rows = []
    for line in text.splitlines():
        cells = [cell.strip() for cell in re.split(r"[│┃]|\s{2,}", line.strip()) if cell.strip()]
        if len(cells) >= 2:
            rows.append(cells)
    return rows


def prints_a_table(text: str) -> bool:
    """A header and at least one row of figures."""
    rows = table_rows(text)
    return len(rows) >= 2 and any(re.search(r"\d", cell) for row in rows[1:] for cell in row)


# What a bench's smoke must print beyond a table, where a bench's table alone would not show it worked
SMOKE_OUTPUT = {
    "fuzz": ["1,000", "tracebacks / internal errors in the log"],  # a clean campaign of 1,000 frames
    "eventsourcing": ["sqlite", "postgres"],  # both libraries on both stores
    "throughput": ["Apache Kafka"],  # the real peer runs in the smoke too
    "cost_growth": ["Apache Kafka"],
    "share_groups": ["Apache Kafka", "Java KafkaShareConsumer", "RabbitMQ"],
    "spark_source": ["Spark's kafka source (Apache Kafka)"],
}


def test_every_bench_is_found():
    assert {"cdc_throughput.py", "cleaner.py", "groups.py", "spark_source.py", "throughput.py"} <= {
        bench.name for bench in BENCHES}
    assert "tables.py" not in {bench.name for bench in BENCHES}


def test_the_readme_lists_every_bench():
    readme = (BENCH_DIR.parent / "README.md").read_text()
    assert [bench.name for bench in BENCHES if f"bench/{bench.name}" not in readme] == []


def group(bench: Path) -> str:
    """Each smoke is its own xdist group (tests/conftest.py would put the module in one): they share no
    fixture and each starts its own servers on free ports, so `make test`'s two workers split them.
    The Spark benches stay one group, so two of their JVMs never run at once (run side by side under
    load, spark_source's Python worker timed out connecting back to its JVM)."""
    return "bench spark" if bench.stem.startswith("spark") else f"bench {bench.stem}"


@pytest.mark.parametrize("bench", [pytest.param(bench, marks=pytest.mark.xdist_group(group(bench)))
                                   for bench in BENCHES], ids=lambda bench: bench.stem)
def test_bench_smoke_prints_its_table(bench):
    with tempfile.TemporaryDirectory(prefix="bench-tmp-") as tmpdir:
        os.chmod(tmpdir, 0o755)   # as /tmp is: a bench's PostgreSQL runs as its own user
        result = run(bench, "--smoke", timeout=400, tmpdir=Path(tmpdir))
        # its brokers' data directories and checkpoints are gone: benches are run again and again
        left = [name for name in os.listdir(tmpdir) if name.startswith(("headwater-", "hw-"))]
    assert result.returncode == 0, f"{bench.name} --smoke failed:\n{result.stderr[-3000:]}"
    assert left == []
    assert prints_a_table(result.stdout), f"{bench.name} --smoke printed no table:\n{result.stdout}"
    for text in SMOKE_OUTPUT.get(bench.stem, []):
        assert text in result.stdout, f"{bench.name} --smoke did not print {text!r}:\n{result.stdout}"


@pytest.mark.parametrize("bench", BENCHES, ids=lambda bench: bench.stem)
def test_bench_help(bench):
    result = run(bench, "--help", timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "--smoke" in result.stdout

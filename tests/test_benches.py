"""Every benchmark in bench/ still runs: `--smoke` (tiny sizes, a few seconds) exits 0 and
prints its table, and `--help` works. Figures are never asserted: this only keeps a bench
from breaking unnoticed. New benches are picked up by their file name alone."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH_DIR = Path(__file__).resolve().parent.parent / "bench"
BENCHES = sorted(BENCH_DIR.glob("*.py"))


def run(bench: Path, *args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(bench), *args], capture_output=True, text=True, timeout=timeout,
                          cwd=BENCH_DIR.parent)


def table_rows(text: str) -> list[list[str]]:
    """The rows of the tables in a bench's output that hold a figure: rich's boxed rows, or
    plain columns set apart by two or more spaces."""
    rows = []
    for line in text.splitlines():
        cells = [cell for cell in re.split(r"[│┃]|\s{2,}", line.strip()) if cell.strip()]
        if len(cells) >= 2 and re.search(r"\d", line):
            rows.append(cells)
    return rows


def test_every_bench_is_found():
    assert {"cdc_throughput.py", "cleaner.py", "groups.py", "spark_source.py", "throughput.py"} <= {
        bench.name for bench in BENCHES}


@pytest.mark.parametrize("bench", BENCHES, ids=lambda bench: bench.stem)
def test_bench_smoke_prints_its_table(bench):
    result = run(bench, "--smoke", timeout=400)
    assert result.returncode == 0, f"{bench.name} --smoke failed:\n{result.stderr[-3000:]}"
    assert len(table_rows(result.stdout)) >= 2, f"{bench.name} --smoke printed no table:\n{result.stdout}"


@pytest.mark.parametrize("bench", BENCHES, ids=lambda bench: bench.stem)
def test_bench_help(bench):
    result = run(bench, "--help", timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "--smoke" in result.stdout

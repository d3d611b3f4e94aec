"""bench/fuzz.py --smoke runs, prints its table and exits 0 (a clean campaign), so the long
campaign's script cannot rot unnoticed."""
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).parents[2] / "bench" / "fuzz.py"


def test_fuzz_bench_smoke():
    run = subprocess.run([sys.executable, str(BENCH), "--smoke", "--seed", "1"], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "Headwater under fuzzing (seed 1)" in run.stdout
    assert "1,000" in run.stdout and "tracebacks / internal errors in the log" in run.stdout

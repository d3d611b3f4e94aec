"""bench/eventsourcing.py --smoke runs both libraries on both stores and prints every row."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_smoke():
    result = subprocess.run([sys.executable, "bench/eventsourcing.py", "--smoke"], cwd=ROOT, env=dict(os.environ),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = [line for line in result.stdout.splitlines() if line.startswith("│")]
    assert len(rows) == 10  # 5 measures x 2 stores
    assert {r.split("│")[1].strip() for r in rows} == {"sqlite", "postgres"}
    assert all(("faster" in r or "slower" in r) for r in rows)

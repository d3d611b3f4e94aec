"""The storage benchmarks, briefly, as tests: the kill soak (SIGKILLs under idempotent acks=all
production lose, duplicate and reorder nothing acknowledged; by hand at length
``bench/kill_soak.py --kills 50``). tests/test_benches.py runs every bench's smoke."""
import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).parents[2] / "bench"


def load(name: str):
    """A bench script as a module, imported the way running it would (its own directory on the path)."""
    if str(BENCH) not in sys.path:
        sys.path.append(str(BENCH))
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_three_kills_lose_duplicate_and_reorder_nothing_acknowledged(tmp_path):
    result = load("kill_soak").soak(tmp_path / "data", kills=3)
    assert result.kills == 3 and result.acknowledged > 900
    assert (result.missing, result.duplicates, result.order_violations) == (0, 0, 0)
    assert result.in_log >= result.acknowledged


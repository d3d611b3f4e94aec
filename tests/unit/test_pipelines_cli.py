"""`headwater pipelines`: the list, and the one-line errors given before Spark starts
(the runs themselves are in tests/spark/test_cluster.py)."""
import json
import socket

import pytest

from headwater.cli.main import build_parser, main
from headwater.pipelines.catalog import PIPELINES


def test_list_names_every_shipped_pipeline_with_its_parameters(capsys):
    assert main(["pipelines", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [p["name"] for p in listed] == list(PIPELINES) == ["windows", "click-through", "revenue-view",
                                                               "card-testing", "latency-stats", "top-pages",
                                                               "device-clocks", "percolator", "search-index", "cache"]
    assert "lateness=2 minutes" in listed[0]["parameters"]
    assert [p["parameters"][-1] for p in listed] == [f"dead-letter={p}.dlq" for p in PIPELINES]


def test_defaults_fit_a_live_stream():
    """A micro-batch a second with what arrived, not the end of the topic in batches of 8."""
    args = build_parser(["pipelines", "run", "windows"]).parse_args(["pipelines", "run", "windows"])
    assert args.trigger == {"processingTime": "1 second"}
    assert {p.params["per-trigger"] for p in PIPELINES.values()} == {"10000"}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("args, message", [
    (["nope"], "unknown pipeline 'nope' (known: windows, click-through, revenue-view, card-testing, "
              "latency-stats, top-pages, device-clocks, percolator, search-index, cache)"),
    (["windows", "--set", "orders=x"], "unknown parameter 'orders' for windows"),
    (["windows", "--master", "yarn"], "unsupported --master 'yarn'"),
    (["windows", "card-testing", "--set", "dead-letter=bad"], "pipelines run together need dead-letter topics of "
     "their own"),
    (["windows", "--master", "spark://127.0.0.1:{port}"], "cannot reach the Spark master spark://127.0.0.1:{port}"),
])
def test_bad_runs_get_one_line(capsys, tmp_path, args, message):
    port = _closed_port()
    args = [a.format(port=port) for a in args]
    assert main(["pipelines", "run", *args, "--output", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("headwater: error: " + message.format(port=port)) and err.count("\n") == 1


def test_trigger_must_be_known(capsys):
    with pytest.raises(SystemExit):
        main(["pipelines", "run", "windows", "--trigger", "sometimes"])
    assert "expected available-now, once or an interval" in capsys.readouterr().err

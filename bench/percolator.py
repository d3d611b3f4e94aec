"""What indexing the standing queries buys the percolator: documents per second matched
against N standing queries by `percolator.QueryIndex` and by the naive loop that
evaluates every query for every document.

    .venv/bin/python bench/percolator.py [--queries N] [--documents N] [--smoke]

In-process, one core, the outdoor shop's queries and documents (`demo.outdoor_shop`):
the matching a micro-batch of the `percolator` pipeline does on the driver. Both answer
the same matches (checked). The peer is the naive loop; no external percolator runs here.
"""
from __future__ import annotations

import argparse
import random
import time

from rich.console import Console
from rich.table import Table

from headwater.demo.outdoor_shop import document, standing_query
from headwater.pipelines.percolator import QueryIndex, compile_query, evaluate
from headwater.testing import bench_arguments


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=10_000)
    parser.add_argument("--documents", type=int, default=500)
    args = bench_arguments(parser, {"queries": 1_000, "documents": 50})
    rng = random.Random(1)
    queries = {f"q{i}": compile_query(standing_query(rng)) for i in range(args.queries)}
    docs = [document(rng, n) for n in range(args.documents)]
    index = QueryIndex()
    started = time.perf_counter()
    for query_id, query in queries.items():
        index.put(query_id, query)
    built = time.perf_counter() - started

    def timed(match) -> tuple[float, list]:
        start = time.perf_counter()
        answers = [match(doc) for doc in docs]
        return len(docs) / (time.perf_counter() - start), answers

    naive_rate, naive = timed(lambda doc: evaluate(queries.items(), doc))
    indexed_rate, indexed = timed(index.match)
    assert indexed == naive, "the index and the naive loop disagree"
    evaluated = sum(len(index.candidates(doc)) for doc in docs) / len(docs)

    table = Table(title=f"{args.documents:,} documents against {args.queries:,} standing queries, one core")
    for column in ("matcher", "queries evaluated per document", "documents/s", "speed-up"):
        table.add_column(column, justify="right")
    table.add_row("naive loop", f"{len(queries):,}", f"{naive_rate:,.0f}", "1.0x")
    table.add_row("query index", f"{evaluated:,.0f}", f"{indexed_rate:,.0f}", f"{indexed_rate / naive_rate:,.1f}x")
    console = Console()
    console.print(table)
    console.print(f"index built in {built * 1000:,.0f} ms; {len(index.always)} queries no key selects are "
                  f"evaluated for every document; {sum(len(m) for m, _ in naive):,} matches, the same in both")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

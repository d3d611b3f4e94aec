"""The shipped `percolator` pipeline on Spark and a real broker: every document is matched
against the standing queries as of its own time, exactly once through a crash in the
middle of its output, and bad queries and documents are counted, not dropped."""
import json
import random

from sparkdata import create_topic, produce, read_back

from headwater.demo.outdoor_shop import document, standing_query
from headwater.pipelines import reference, standing_queries
from headwater.pipelines.catalog import PIPELINES, Run
from headwater.pipelines.exactly_once import TopicPerBatch, _sort_key

T0 = 1_700_000_000_000
BAD_QUERIES = [(b"q-bad-json", b"{price < 100"), (b"q-bad-kind", b'{"term": ["title", "two words"]}')]


class CrashAfterHalfTheMatches(TopicPerBatch):
    """Writes half of a batch's matches, then fails: the driver dying mid-output."""

    def __call__(self, batch, batch_id):
        rows = sorted(batch.collect(), key=_sort_key)  # the order TopicPerBatch numbers them in
        super().__call__(batch.sparkSession.createDataFrame(rows[:len(rows) // 2], batch.schema), batch_id)
        raise RuntimeError(f"crashed while writing batch {batch_id}")


def _run(spark, broker, tmp_path) -> Run:
    params = {**PIPELINES["percolator"].params}
    return Run(spark, {"bootstrap.servers": broker.bootstrap}, tmp_path / "checkpoints", tmp_path,
               {"availableNow": True}, params)


def test_documents_meet_the_queries_of_their_time_exactly_once(spark, broker, tmp_path):
    rng = random.Random(11)
    create_topic(broker.bootstrap, "queries", 1, **{"cleanup.policy": "compact"})
    create_topic(broker.bootstrap, "documents", 2)
    create_topic(broker.bootstrap, "matches", 2)
    changes = [(f"q{i}".encode(), json.dumps(standing_query(rng)).encode(), T0 + i) for i in range(300)]
    changes += [(k, v, T0 + 400) for k, v in BAD_QUERIES]
    docs = [json.dumps(document(rng, n)).encode() for n in range(200)]
    docs[5], docs[6] = b"not json", b"[1, 2]"
    docs[7] = json.dumps({"title": "red tent", "price": "cheap", "category": "tents"}).encode()
    produce(broker.bootstrap, "queries", [(k, v, 0, None, t) for k, v, t in changes])
    produce(broker.bootstrap, "documents", [(None, d, n % 2, None, T0 + 1000 + n) for n, d in enumerate(docs)])

    run = _run(spark, broker, tmp_path)
    records = run.raw_records("queries,documents")  # the shipped pipeline's plan, with a sink that crashes
    crashing = standing_queries.Percolator(tmp_path / "percolator.db", run.client, "queries", "matches")
    crashing.matches = CrashAfterHalfTheMatches(run.client, "matches", "query_id")
    query = run.start("percolator", records, crashing)
    try:
        query.awaitTermination()
        raise AssertionError("the crashing sink did not crash")
    except Exception as exc:
        assert "crashed while writing batch" in str(exc)
    PIPELINES["percolator"].start(_run(spark, broker, tmp_path)).awaitTermination()  # from the checkpoint

    # Later: a query changed, one deleted (a tombstone), one added, interleaved in time
    # with new documents, all read in one micro-batch; documents stamped earlier than a
    # change meet the query as it was.
    later = T0 + 10_000
    more = [(b"q1", json.dumps({"term": ["title", "tent"]}).encode(), later + 10),
            (b"q2", None, later + 20), (b"q-new", json.dumps({"field": "category", "op": "=", "value": "tents"})
                                        .encode(), later + 30)]
    produce(broker.bootstrap, "queries", [(k, v, 0, None, t) for k, v, t in more])
    more_docs = [json.dumps(document(rng, 200 + n)).encode() for n in range(60)]
    produce(broker.bootstrap, "documents", [(None, d, n % 2, None, later + n) for n, d in enumerate(more_docs)])
    PIPELINES["percolator"].start(_run(spark, broker, tmp_path)).awaitTermination()

    query_records = [(t, 0, offset, k.decode(), v)
                     for offset, (k, v, t) in enumerate(changes + more)]
    doc_records = [(T0 + 1000 + n, n % 2, n // 2, d) for n, d in enumerate(docs)]
    doc_records += [(later + n, n % 2, 100 + n // 2, d) for n, d in enumerate(more_docs)]
    want_matches, want_rejects = reference.percolate(query_records, doc_records)

    written = [json.loads(value) for _, value in read_back(broker.bootstrap, "matches").values()]
    got = [(m["query_id"], m["partition"], m["offset"]) for m in written]
    assert len(got) == len(set(got))  # exactly once
    assert set(got) == want_matches and len(want_matches) > 100
    assert {m["query_id"] for m in written if m["offset"] >= 100} & {"q1", "q-new"}
    rejects = standing_queries.read_rejects(tmp_path / "percolator.db")
    assert {(p, o, q) for t, p, o, q in rejects if t == "documents"} == want_rejects
    assert sorted(reason for (t, *_), reason in rejects.items() if t == "queries") == [
        "a term is one word; use phrase for 'two words'",
        "not JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"]
    assert rejects[("documents", 1, 2, "")] == "not a document: Expecting value: line 1 column 1 (char 0)"
    assert rejects[("documents", 0, 3, "")] == "not a document: not a JSON object but list"

"""The web console in a real browser: Debian's headless chromium driven by selenium, against
a real broker. Each page opened, the message browser checked against what was produced, the
live tail seen receiving a new record, a group's offsets reset and checked with the CLI, the
lag plot seen to have data, the share group, transactions and CDC pages checked against
known workloads. Screenshots of every page are saved in the test's tmp dir."""
import html
import json
from datetime import datetime, timezone
import shutil
import sqlite3
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.expected_conditions import staleness_of
from selenium.webdriver.support.ui import Select, WebDriverWait

from headwater.cdc.sqlite import SqliteConnector
from headwater.testing import BrokerProcess, wait_until

from tests.support import share_workload, txn_workload
from tests.support.groups import holding_every_partition

TOPIC, GROUP = "orders", "billing"
PARTITIONS = 2
RECORDS = [(i % PARTITIONS, f"order-{i}", {"order": i, "items": ["tea"] * (i % 3), "total": i * 2.5})
           for i in range(30)]   # (partition, key, JSON value)
CONSUMED = {0: 10, 1: 5}         # what the billing group committed


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    data = tmp_path_factory.mktemp("console") / "data"
    with BrokerProcess(data, "--http-listener", "127.0.0.1:0", "--console-allow-writes") as proc:
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS)])[TOPIC].result(30)
        producer = Producer({"bootstrap.servers": proc.bootstrap})
        for partition, key, value in RECORDS:
            producer.produce(TOPIC, key=key.encode(), value=json.dumps(value).encode(), partition=partition,
                             headers=[("source", b"till-3")])
        producer.flush(30)
        committer = Consumer({"bootstrap.servers": proc.bootstrap, "group.id": GROUP, "enable.auto.commit": False})
        committer.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in CONSUMED.items()], asynchronous=False)
        committer.close()
        yield proc


@pytest.fixture(scope="module")
def browser():
    if shutil.which("chromedriver") is None:
        pytest.fail("chromedriver not found: `make system-deps` installs Debian's chromium and chromium-driver")
    options = Options()
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1000"):
        options.add_argument(flag)
    options.binary_location = shutil.which("chromium")
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory):
    return tmp_path_factory.mktemp("screenshots")


def open_page(browser, broker, path: str):
    browser.get(broker.console_url + path.lstrip("/"))
    WebDriverWait(browser, 30).until(lambda b: b.execute_script("return document.readyState") == "complete")


def wait_for(browser, condition, what: str, timeout: float = 30):
    return WebDriverWait(browser, timeout).until(lambda b: condition(), message=f"waiting for {what}")


def rows(browser, table_id: str) -> list[list[str]]:
    return [[cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
            for row in browser.find_elements(By.CSS_SELECTOR, f"#{table_id} tbody tr")]


def shown_records(browser, table_id: str = "messages") -> list[tuple[int, int, str, dict, str]]:
    """(partition, offset, key, value as JSON, headers) of each record row."""
    return [(int(r[0]), int(r[1]), r[3], json.loads(r[4]), r[5])
            for r in rows(browser, table_id) if len(r) == 6]


def produced(partition: int) -> list[tuple[int, int, str, dict, str]]:
    mine = [(key, value) for p, key, value in RECORDS if p == partition]
    return [(partition, offset, key, value, "source: till-3") for offset, (key, value) in enumerate(mine)]


def test_overview_lists_topics_and_groups(browser, broker, screenshots):
    open_page(browser, broker, "/")
    topics = {r[0]: r for r in rows(browser, "topics")}
    assert topics[TOPIC][1:3] == [str(PARTITIONS), str(len(RECORDS))]
    groups = {r[0]: r for r in rows(browser, "groups")}
    assert groups[GROUP][1:] == ["classic", "Empty", "0", str(len(RECORDS) - sum(CONSUMED.values()))]
    wait_for(browser, lambda: browser.find_elements(By.CSS_SELECTOR, "#rate-plot canvas"), "the rate plot")
    browser.save_screenshot(str(screenshots / "overview.png"))


def test_rate_plot_leaves_out_internal_topics_and_never_repeats_a_colour(browser, broker, screenshots):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    many = [f"rate-{i:02d}" for i in range(12)]   # more topics than the old eight-colour palette
    for future in admin.create_topics([NewTopic(name, 1) for name in many]).values():
        future.result(30)
    open_page(browser, broker, "/")
    script = ("const p = plots['rate-plot']; return p ? p.chart.series.slice(1).map(s => [s.label, s._stroke || "
              "s.stroke()]) : null;")
    series = wait_for(browser, lambda: (s := browser.execute_script(script)) and len(s) > len(many) and s,
                      "the new topics in the rate plot", timeout=60)
    labels = [label for label, _ in series]
    assert labels == sorted(set(many) | {TOPIC}) and not any(label.startswith("__") for label in labels)
    assert len({stroke for _, stroke in series}) == len(series)
    assert browser.find_elements(By.CSS_SELECTOR, "#rate-plot .u-legend .u-series")   # a legend names them
    browser.save_screenshot(str(screenshots / "rates.png"))


def test_message_browser_shows_what_was_produced(browser, broker, screenshots):
    for partition in range(PARTITIONS):
        open_page(browser, broker, f"/topics/{TOPIC}?mode=offset&offset=0&partition={partition}&limit=1000")
        assert shown_records(browser) == produced(partition)
    # The form: newest first, partition 1, five records.
    open_page(browser, broker, f"/topics/{TOPIC}")
    Select(browser.find_element(By.NAME, "mode")).select_by_value("newest")
    Select(browser.find_element(By.NAME, "partition")).select_by_value("1")
    limit = browser.find_element(By.NAME, "limit")
    limit.clear()
    limit.send_keys("5")
    browser.find_element(By.CSS_SELECTOR, "#browse button").click()
    wait_for(browser, lambda: "limit=5" in browser.current_url, "the browse form's page")
    assert shown_records(browser) == produced(1)[-5:][::-1]
    assert rows(browser, "partitions") == [[str(p), "0", str(len(produced(p))), str(len(produced(p))),
                                            r[4], "1"] for p, r in enumerate(rows(browser, "partitions"))]
    browser.save_screenshot(str(screenshots / "topic.png"))


def search_in_browser(browser, broker, fields: dict[str, str]) -> None:
    open_page(browser, broker, f"/topics/{TOPIC}")
    form = browser.find_element(By.ID, "search")
    for name, value in fields.items():
        field = form.find_element(By.NAME, name)
        if field.tag_name == "select":
            Select(field).select_by_value(value)
        else:
            field.send_keys(value)
    form.find_element(By.TAG_NAME, "button").click()
    WebDriverWait(browser, 30).until(staleness_of(form), message="the search results")


def offsets_of(predicate) -> list[tuple[int, int]]:
    """(partition, offset) of the produced records a plain-Python predicate over (key, value) keeps."""
    return [(p, n) for p in range(PARTITIONS)
            for n, (key, value) in enumerate((k, v) for q, k, v in RECORDS if q == p) if predicate(key, value)]


@pytest.mark.parametrize("fields, predicate", [
    ({"key": "order-1"}, lambda k, v: "order-1" in k),
    ({"key": "order-1", "key_match": "exact"}, lambda k, v: k == "order-1"),
    ({"value": '"total": 2'}, lambda k, v: '"total": 2' in json.dumps(v)),
    ({"path": '$.items[?(@ == "tea")]', "partition": "1"}, lambda k, v: v["items"] and k.endswith(
        tuple("13579"))),
    ({"path": "$.order", "equals": "12"}, lambda k, v: v["order"] == 12),
    ({"header": "source", "header_value": "till"}, lambda k, v: True),
])
def test_search_finds_what_a_plain_filter_over_the_produced_records_finds(browser, broker, fields, predicate):
    search_in_browser(browser, broker, fields)
    shown = [(p, o) for p, o, *_ in shown_records(browser)]
    assert shown == offsets_of(predicate)
    scanned = len(RECORDS) // PARTITIONS if "partition" in fields else len(RECORDS)
    assert (browser.find_element(By.ID, "scanned").text, browser.find_element(By.ID, "matched").text) == \
        (str(scanned), str(len(shown)))
    assert not browser.find_elements(By.ID, "more")   # everything read within the budget


def test_search_by_time_starts_at_the_first_offset_at_or_after_it(browser, broker):
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "timestamps"})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    stamps = [m.timestamp()[1] for m in consumer.consume(len(produced(0)), 30)]
    consumer.close()
    since = stamps[len(stamps) // 2]
    moment = datetime.fromtimestamp(since / 1000, timezone.utc).isoformat(timespec="milliseconds")
    search_in_browser(browser, broker, {"partition": "0", "since": moment})
    assert [o for _, o, *_ in shown_records(browser)] == [n for n, t in enumerate(stamps) if t >= since]


def test_a_search_stops_at_its_budget_and_continues_from_where_it_stopped(browser, broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("haystack", 1)])["haystack"].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50})
    needle = 11_000   # past the 10,000 records one search reads
    for i in range(12_000):
        producer.produce("haystack", key=b"needle" if i == needle else b"straw", value=b"x", partition=0)
    producer.flush(60)
    open_page(browser, broker, "/topics/haystack/search?key=needle&key_match=exact")
    assert (browser.find_element(By.ID, "scanned").text, browser.find_element(By.ID, "matched").text) == \
        ("10000", "0")
    more = browser.find_element(By.ID, "more")
    assert more.text == "continue from offsets 0:10000"
    more.click()
    WebDriverWait(browser, 30).until(staleness_of(more), message="the continued search")
    assert (browser.find_element(By.ID, "scanned").text, browser.find_element(By.ID, "matched").text) == \
        ("2000", "1")
    assert [(p, o, k) for p, o, _, k, *_ in rows(browser, "messages")] == [("0", str(needle), "needle")]
    assert not browser.find_elements(By.ID, "more")


def test_a_malformed_json_path_is_an_error_page(browser, broker):
    search_in_browser(browser, broker, {"path": "$[?("})
    assert "JSON path '$[?('" in browser.find_element(By.TAG_NAME, "main").text


def test_live_tail_receives_a_new_record(browser, broker, screenshots):
    open_page(browser, broker, f"/topics/{TOPIC}")
    browser.find_element(By.ID, "tail-start").click()
    wait_for(browser, lambda: browser.find_element(By.ID, "tail-status").text == "tailing", "the tail to open")
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(TOPIC, key=b"late", value=b'{"order": 999}', partition=1, headers=[("source", b"web")])
    producer.flush(30)
    wait_for(browser, lambda: shown_records(browser, "tail"), "the new record in the tail")
    assert shown_records(browser, "tail") == [(1, len(produced(1)), "late", {"order": 999}, "source: web")]
    browser.save_screenshot(str(screenshots / "tail.png"))
    browser.find_element(By.ID, "tail-stop").click()


def lag_series(browser) -> dict:
    return browser.execute_script(
        "const p = plots['lag-plot']; return p ? {names: p.chart.series.slice(1).map(s => s.label),"
        " points: p.chart.data[1].filter(v => v !== null).length} : null;")


def test_group_page_shows_offsets_lag_and_a_lag_plot(browser, broker, screenshots):
    open_page(browser, broker, f"/groups/{GROUP}")
    ends = {0: len(produced(0)), 1: len(produced(1)) + 1}   # the tail test added one record to partition 1
    assert rows(browser, "offsets") == [[TOPIC, str(p), str(o), str(ends[p]), str(ends[p] - o), ""]
                                        for p, o in CONSUMED.items()]
    assert browser.find_element(By.ID, "group-state").text == "Empty"
    series = wait_for(browser, lambda: (s := lag_series(browser)) and s["points"] >= 2 and s, "two lag samples")
    assert series["names"] == [f"{TOPIC}-0", f"{TOPIC}-1"]
    browser.save_screenshot(str(screenshots / "group.png"))


def test_a_kip848_group_has_a_page_with_epochs_assignment_and_lag(browser, broker, screenshots):
    """A consumer group on KIP-848's protocol (group.protocol=consumer): listed with type consumer,
    its page shows the member's epoch, assignment and target, and lag counts the partition it never committed."""
    group = "billing-848"
    member = holding_every_partition(broker.bootstrap, group, TOPIC, PARTITIONS, **{"group.protocol": "consumer"})
    try:
        member.commit(offsets=[TopicPartition(TOPIC, 0, 4)], asynchronous=False)
        marks = {p: member.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10) for p in range(PARTITIONS)}
        lags = {p: high - (4 if p == 0 else low) for p, (low, high) in marks.items()}
        open_page(browser, broker, "/groups")
        listed = {r[0]: r for r in rows(browser, "groups")}
        assert listed[group][1:] == ["consumer", "Stable", "1", str(sum(lags.values()))]
        open_page(browser, broker, f"/groups/{group}")
        assert browser.find_element(By.ID, "group-type").text == "consumer"
        assert browser.find_element(By.ID, "group-state").text == "Stable"
        epoch = browser.find_element(By.ID, "group-epoch").text
        every = ", ".join(f"{TOPIC}-{p}" for p in range(PARTITIONS))
        (shown,) = rows(browser, "members")
        assert [shown[0], shown[4], shown[5], shown[6]] == [member.memberid(), epoch, every, every]
        assert rows(browser, "offsets") == [
            [TOPIC, "0", "4", str(marks[0][1]), str(lags[0]), member.memberid()],
            [TOPIC, "1", "-", str(marks[1][1]), str(lags[1]), member.memberid()]]
        assert not browser.find_elements(By.ID, "reset")   # no reset while it has members
        browser.save_screenshot(str(screenshots / "group-kip848.png"))
    finally:
        member.close()


def post(broker, path: str, form: str) -> tuple[int, str]:
    request = urllib.request.Request(broker.console_url + path.lstrip("/"), data=form.encode(), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, html.unescape(error.read().decode())


def describe(broker) -> dict[int, int]:
    result = subprocess.run([sys.executable, "-m", "headwater", "groups", "describe", GROUP, "--json",
                             "--bootstrap-server", broker.bootstrap], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return {o["partition"]: o["committed_offset"] for o in json.loads(result.stdout)["offsets"]}


def test_reset_offsets_with_confirmation_then_checked_with_the_cli(browser, broker, screenshots):
    open_page(browser, broker, f"/groups/{GROUP}")
    Select(browser.find_element(By.NAME, "to")).select_by_value("offset")
    browser.find_element(By.NAME, "value").send_keys("3")
    browser.find_element(By.CSS_SELECTOR, "#reset button").click()
    wait_for(browser, lambda: browser.find_elements(By.ID, "reset-preview"), "the confirmation page")
    assert rows(browser, "reset-preview") == [[str(p), str(o), "3"] for p, o in CONSUMED.items()]
    assert describe(broker) == CONSUMED   # nothing committed before the confirmation
    browser.save_screenshot(str(screenshots / "reset.png"))
    browser.find_element(By.CSS_SELECTOR, "#confirm button").click()
    wait_for(browser, lambda: browser.find_elements(By.ID, "offsets"), "the group page again")
    assert describe(broker) == {0: 3, 1: 3}
    assert [r[2] for r in rows(browser, "offsets")] == ["3", "3"]


def test_reset_refused_while_the_group_is_active(broker):
    member = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP, "enable.auto.commit": False,
                       "heartbeat.interval.ms": 500})
    member.subscribe([TOPIC])
    try:
        wait_until(lambda: member.poll(0.2) is None and member.assignment(), what="the member's assignment")
        status, page = post(broker, f"/groups/{GROUP}/reset", f"topic={TOPIC}&to=earliest&confirm=yes")
        assert status == 409
        assert f"consumer group '{GROUP}' has 1 active member(s); stop its consumers" in page
    finally:
        member.close()
    assert describe(broker) == {0: 3, 1: 3}


@pytest.mark.parametrize("form, status, message", [
    (f"topic={TOPIC}&to=sideways", 400, "reset to 'sideways'? use one of earliest, latest, offset, datetime, shift"),
    (f"topic={TOPIC}&to=offset&value=abc", 400, "the offset must be a whole number, got 'abc'"),
    (f"topic={TOPIC}&to=datetime&value=noon", 400, "'noon' is not an ISO 8601 date-time"),
    ("to=earliest", 404, "topic '' does not exist"),
    ("topic=nope&to=earliest", 404, "topic 'nope' does not exist"),
])
def test_malformed_reset_requests_are_refused(broker, form, status, message):
    got, page = post(broker, f"/groups/{GROUP}/reset", form + "&confirm=yes")
    assert (got, message in page, "Traceback" in page) == (status, True, False)
    assert post(broker, "/groups/nobody/reset", f"topic={TOPIC}&to=earliest")[0] == 404


def test_share_group_page_shows_delivery_state_and_links_its_dead_letters(browser, broker, screenshots):
    member = share_workload.run(broker.bootstrap)
    try:
        open_page(browser, broker, "/groups")
        assert rows(browser, "share-groups") == [[share_workload.GROUP, "Stable", "1", "0", share_workload.DLQ]]
        browser.find_element(By.LINK_TEXT, share_workload.GROUP).click()
        wait_for(browser, lambda: browser.find_elements(By.ID, "share-partitions"), "the share group page")
        assert browser.find_element(By.ID, "group-state").text == "Stable"
        assert [r[3:6] for r in rows(browser, "members")] == [["/127.0.0.1", share_workload.TOPIC,
                                                               f"{share_workload.TOPIC}-0, {share_workload.TOPIC}-1"]]
        dead = share_workload.rejected
        assert rows(browser, "share-partitions") == [
            [share_workload.TOPIC, str(p), str(n), str(n), "0", "0", str(dead(p)), str(dead(p)), "0"]
            for p, n in share_workload.PER_PARTITION.items()]
        configs = {r[0]: r[1:] for r in rows(browser, "configs")}
        assert configs["errors.deadletterqueue.topic.name"] == [share_workload.DLQ, "group"]
        assert configs["share.delivery.count.limit"] == ["5", "default"]
        browser.save_screenshot(str(screenshots / "share_group.png"))
        browser.find_element(By.CSS_SELECTOR, "#dead-letters a").click()
        wait_for(browser, lambda: browser.find_elements(By.ID, "messages"), "the dead-letter topic's messages")
        letters = sorted((int(h["__dlq.errors.partition"]), int(h["__dlq.errors.offset"])) for h in (
            dict(line.split(": ", 1) for line in r[5].splitlines()) for r in rows(browser, "messages")))
        assert letters == [(p, i) for p, n in share_workload.PER_PARTITION.items()
                           for i in range(n) if share_workload.is_poison(i)]
    finally:
        member.close()


def test_cdc_page_shows_the_position_a_connector_stored(browser, broker, tmp_path, screenshots):
    path = tmp_path / "shop.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)")
    connector = SqliteConnector(str(path), ["items"], "shop", broker.bootstrap, log=lambda _: None)
    stop = threading.Event()
    runner = threading.Thread(target=connector.run, kwargs={"should_stop": stop.is_set}, daemon=True)
    runner.start()
    try:
        changes = 4
        with sqlite3.connect(path) as db:
            db.executemany("INSERT INTO items VALUES (?, ?)", [(i, f"item-{i}") for i in range(changes)])

        def shown():
            open_page(browser, broker, "/cdc")
            return [r for r in rows(browser, "connectors") if r[2:3] == [f"id {changes}"]]
        row, = wait_until(shown, what="the connector's stored position on the page")
    finally:
        stop.set()
        runner.join(30)
    assert row[:2] == [f"sqlite:{path}", "sqlite"]     # the changelog id of the 4th change, acknowledged
    assert 0 <= int(row[4]) < 120
    browser.save_screenshot(str(screenshots / "cdc.png"))


def test_transactions_page_shows_ids_states_and_held_back_partitions(browser, broker, screenshots):
    work = txn_workload.run(broker.bootstrap)
    try:
        open_page(browser, broker, "/transactions")
        shown = {r[0]: r for r in rows(browser, "transactions")}
        assert sorted(shown) == [txn_workload.ABORTS, txn_workload.COMMITS, txn_workload.OPEN]
        assert [shown[i][2:6] for i in sorted(shown)] == [   # epoch, state, timeout (librdkafka's default), partitions
            ["0", "CompleteAbort", "60000", ""], ["1", "Empty", "60000", ""],
            ["0", "Ongoing", "60000", f"{txn_workload.TOPIC}-0"]]
        assert len({shown[i][1] for i in shown}) == 3                  # a producer id each
        assert float(shown[txn_workload.OPEN][6]) >= 0 and shown[txn_workload.COMMITS][6] == ""
        assert (browser.find_element(By.ID, "committed").text, browser.find_element(By.ID, "aborted").text) == \
            ("2", "1")
        assert rows(browser, "held-back") == [[txn_workload.TOPIC, "0", str(work.last_stable), str(work.log_end),
                                               str(work.log_end - work.last_stable)]]
        browser.save_screenshot(str(screenshots / "transactions.png"))
    finally:
        work.open_producer.abort_transaction(30)
    open_page(browser, broker, "/transactions")
    assert rows(browser, "held-back") == [["none: every partition is stable up to its log end"]]
    assert [r[3] for r in rows(browser, "transactions") if r[0] == txn_workload.OPEN] == ["CompleteAbort"]


ODD_GROUP = "team/a ?#%2F b"  # legal group id: a separator, query and fragment marks, an escape, spaces


def test_a_group_whose_id_has_reserved_characters_has_a_working_page(browser, broker):
    committer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": ODD_GROUP, "enable.auto.commit": False})
    committer.commit(offsets=[TopicPartition(TOPIC, 0, 2)], asynchronous=False)
    committer.close()
    open_page(browser, broker, "/groups")
    link = next(a for a in browser.find_elements(By.CSS_SELECTOR, "#groups a") if a.text == ODD_GROUP)
    assert link.get_attribute("href") == broker.console_url + "groups/" + urllib.parse.quote(ODD_GROUP, safe="")
    link.click()
    wait_for(browser, lambda: browser.find_elements(By.ID, "offsets"), "the group's page")
    assert browser.find_element(By.TAG_NAME, "h1").text == f"Consumer group {ODD_GROUP}"
    # the topic's other partition, never committed, is listed too ("-"): its records count as lag
    assert [r[:3] for r in rows(browser, "offsets")] == [[TOPIC, "0", "2"], [TOPIC, "1", "-"]]
    wait_for(browser, lambda: browser.execute_script("return !!plots['lag-plot']"), "the lag plot, fed from lag.json")
    # the reset form posts to the encoded path and is redirected back to it
    path = "/groups/" + urllib.parse.quote(ODD_GROUP, safe="")
    status, page = post(broker, path + "/reset", f"topic={TOPIC}&to=earliest&confirm=yes")
    assert status == 200 and f"Consumer group {html.escape(ODD_GROUP)}" in page
    assert post(broker, "/groups/team/reset", f"topic={TOPIC}&to=earliest")[0] == 404  # the id's prefix is no group


NEW_TOPIC = "inbox"


def submit(browser, form_id: str, fields: dict[str, str], then: str) -> None:
    form = browser.find_element(By.ID, form_id)
    for name, value in fields.items():
        field = form.find_element(By.NAME, name)
        if field.tag_name == "select":
            Select(field).select_by_value(value)
        else:
            field.clear()
            field.send_keys(value)
    form.find_element(By.TAG_NAME, "button").click()
    WebDriverWait(browser, 30).until(staleness_of(form), message=f"the page after {form_id}")
    wait_for(browser, lambda: browser.find_elements(By.ID, then) or browser.find_elements(By.ID, "error"),
             f"the page after {form_id}")


def topic_configs(broker, topic: str) -> dict[str, str]:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource("topic", topic)
    return {name: entry.value for name, entry in admin.describe_configs([resource])[resource].result(30).items()}


def test_create_a_topic_then_described_by_the_admin_client(browser, broker, screenshots):
    open_page(browser, broker, "/")
    submit(browser, "create-topic", {"name": NEW_TOPIC, "partitions": "3", "configs": "retention.ms=3600000"},
           then="partitions")
    assert browser.find_element(By.TAG_NAME, "h1").text == f"Topic {NEW_TOPIC}"
    metadata = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(NEW_TOPIC, timeout=30)
    assert len(metadata.topics[NEW_TOPIC].partitions) == 3
    assert topic_configs(broker, NEW_TOPIC)["retention.ms"] == "3600000"
    browser.save_screenshot(str(screenshots / "created.png"))
    # The broker's own refusal, as CreateTopics answers it, on the page.
    open_page(browser, broker, "/")
    submit(browser, "create-topic", {"name": NEW_TOPIC, "partitions": "1"}, then="partitions")
    assert f"TOPIC_ALREADY_EXISTS: topic '{NEW_TOPIC}' already exists" in browser.find_element(By.TAG_NAME, "main").text


def test_edit_a_topic_config_then_seen_by_describe_configs(browser, broker):
    open_page(browser, broker, f"/topics/{NEW_TOPIC}")
    submit(browser, "alter-config", {"name": "retention.ms", "value": "7200000"}, then="partitions")
    assert topic_configs(broker, NEW_TOPIC)["retention.ms"] == "7200000"
    assert {r[0]: r[1:] for r in rows(browser, "configs")}["retention.ms"] == ["7200000", "topic"]
    submit(browser, "alter-config", {"name": "retention.ms", "value": "soon"}, then="partitions")
    assert "INVALID_CONFIG" in browser.find_element(By.TAG_NAME, "main").text
    assert topic_configs(broker, NEW_TOPIC)["retention.ms"] == "7200000"   # unchanged
    open_page(browser, broker, f"/topics/{NEW_TOPIC}")
    submit(browser, "alter-config", {"name": "retention.ms", "value": ""}, then="partitions")   # the default again
    assert {r[0]: r[2] for r in rows(browser, "configs")}["retention.ms"] == "default"


def read_partition(broker, topic: str, partition: int, count: int):
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "reader", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, partition, 0)])
    messages = []
    while len(messages) < count:
        messages += [m for m in consumer.consume(count - len(messages), 30) if m.error() is None]
    consumer.close()
    return messages


def test_produce_a_message_then_read_back_by_a_kafka_consumer(browser, broker, screenshots):
    for n in range(2):
        open_page(browser, broker, f"/topics/{NEW_TOPIC}")
        submit(browser, "produce", {"partition": "2", "key": f"k-{n}", "value": f'{{"n": {n}}}',
                                    "headers": "trace: abc\nsource: console"}, then="messages")
        assert shown_records(browser) == [(2, n, f"k-{n}", {"n": n}, "trace: abc\nsource: console")]
    browser.save_screenshot(str(screenshots / "produced.png"))
    messages = read_partition(broker, NEW_TOPIC, 2, 2)
    assert [(m.offset(), m.key(), m.value(), m.headers()) for m in messages] == [
        (n, f"k-{n}".encode(), f'{{"n": {n}}}'.encode(), [("trace", b"abc"), ("source", b"console")])
        for n in range(2)]


def test_delete_records_with_confirmation_moves_the_low_watermark(browser, broker, screenshots):
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "watermarks"})
    assert consumer.get_watermark_offsets(TopicPartition(NEW_TOPIC, 2), timeout=30) == (0, 2)
    open_page(browser, broker, f"/topics/{NEW_TOPIC}")
    submit(browser, "delete-records", {"partition": "2", "before": "1"}, then="delete-preview")
    assert "1 record(s) can no longer be read" in browser.find_element(By.ID, "delete-preview").text
    assert consumer.get_watermark_offsets(TopicPartition(NEW_TOPIC, 2), timeout=30) == (0, 2)  # not yet
    browser.save_screenshot(str(screenshots / "delete_records.png"))
    browser.find_element(By.CSS_SELECTOR, "#confirm button").click()
    wait_for(browser, lambda: browser.find_elements(By.ID, "partitions"), "the topic page again")
    assert consumer.get_watermark_offsets(TopicPartition(NEW_TOPIC, 2), timeout=30) == (1, 2)
    assert rows(browser, "partitions")[2][1:3] == ["1", "2"]
    consumer.close()


@pytest.mark.parametrize("path, form, status, message", [
    ("/topics", "name=&partitions=1", 400, "INVALID_TOPIC_EXCEPTION"),
    ("/topics", "name=x&partitions=many", 400, "partitions must be a whole number, got 'many'"),
    ("/topics", "name=x&partitions=1&configs=retention.ms", 400, "config 'retention.ms' is not name=value"),
    ("/topics", "name=x&partitions=1&configs=retention.ms%3Dsoon", 400, "INVALID_CONFIG"),
    (f"/topics/{TOPIC}/configs", "name=no.such.config&value=1", 400, "INVALID_CONFIG"),
    (f"/topics/{TOPIC}/produce", "value=v&partition=7", 400, "partition_id 7 is not one of 0..1"),
    (f"/topics/{TOPIC}/produce", "value=v&headers=no-colon", 400, "header 'no-colon' is not name:value"),
    (f"/topics/{TOPIC}/delete-records", "before=1", 400, "partition must be a whole number, got ''"),
    (f"/topics/{TOPIC}/delete-records", "partition=0&before=99999&confirm=yes", 400, "OFFSET_OUT_OF_RANGE"),
    ("/topics/nope/produce", "value=v", 404, "topic 'nope' does not exist"),
    ("/acls", "resource_type=PLANET&operation=READ&principal=User:x", 400, "unknown ACL field value 'PLANET'"),
    ("/acls", "resource_type=TOPIC&resource_name=t&operation=READ&principal=nobody", 400, "INVALID_REQUEST"),
    ("/users", "name=zoe", 400, "a new user needs a password"),
    ("/users", "name=zoe&password=p&mechanism=MD5", 400, "mechanism 'MD5'"),
    ("/users", "name=nobody&action=delete", 400, "RESOURCE_NOT_FOUND"),
])
def test_malformed_writes_are_refused_and_change_nothing(broker, path, form, status, message):
    before = watermarks(broker)
    got, page = post(broker, path, form)
    assert (got, message in page, "Traceback" in page) == (status, True, False), page[-500:]
    assert watermarks(broker) == before
    assert "x" not in AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=30).topics


def watermarks(broker) -> list[tuple[int, int]]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "watermarks"})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30) for p in range(PARTITIONS)]
    finally:
        consumer.close()


def test_a_form_posted_from_another_site_is_refused(broker):
    request = urllib.request.Request(broker.console_url + f"groups/{GROUP}/reset", method="POST",
                                     data=f"topic={TOPIC}&to=earliest&confirm=yes".encode(),
                                     headers={"Origin": "http://evil.example"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 403 and "another site" in html.unescape(refused.value.read().decode())
    assert describe(broker) == {0: 3, 1: 3}   # the reset to earliest did not happen

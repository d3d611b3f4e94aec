"""The console of a secured broker (one with a SASL listener) asks for a user of the broker's
SCRAM credentials: plain HTTP requests and Debian's chromium get nothing before logging in,
the data after; a wrong password is refused, logged with the peer and slowed down."""
import base64
import http.client
import json
import ssl
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                  ResourcePatternType, ResourceType)
from selenium.webdriver.common.by import By
from selenium.webdriver.support.expected_conditions import staleness_of
from selenium.webdriver.support.ui import WebDriverWait

from headwater.testing import BrokerProcess, wait_until

from .test_console_browser import browser, open_page, rows, submit, wait_for  # noqa: F401 (the browser fixture)

PASSWORD = "correct horse battery staple"
TOPIC = "ledger"
VALUES = [f"entry-{i}" for i in range(5)]


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """alice and erin are super users; dave has a password but no ACL on the cluster."""
    data = tmp_path_factory.mktemp("console-login") / "data"
    for user in ("alice", "dave", "erin"):
        subprocess.run([sys.executable, "-m", "headwater", "users", "create", "--offline", "--data-dir", str(data),
                        user, "--password", PASSWORD, "--iterations", "4096"], check=True, capture_output=True)
    with BrokerProcess(data, "--listener", "SASL_PLAINTEXT://127.0.0.1:0", "--http-listener", "127.0.0.1:0",
                       "--console-allow-writes", "--super-user", "User:alice", "--super-user", "User:erin",
                       "--failed-authentication-delay-ms", "1") as proc:
        producer = Producer({"bootstrap.servers": proc.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                             "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice", "sasl.password": PASSWORD})
        for value in VALUES:
            producer.produce(TOPIC, value.encode(), partition=0)
        assert producer.flush(30) == 0
        yield proc


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args):
        return None


_http = urllib.request.build_opener(_NoRedirect)


def fetch(broker, path: str, form: dict | None = None, headers: dict | None = None):
    """(status, headers, body) of one request, redirects not followed."""
    data = urllib.parse.urlencode(form).encode() if form is not None else None
    request = urllib.request.Request(broker.console_url + path.lstrip("/"), data=data, headers=headers or {})
    try:
        with _http.open(request, timeout=30) as response:
            return response.status, response.headers, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read().decode()


def basic(user: str, password: str) -> dict:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_nothing_before_login(secured):
    status, headers, _ = fetch(secured, f"/topics/{TOPIC}")
    assert (status, headers["Location"]) == (303, f"/login?next=/topics/{TOPIC}")
    for path in ("/metrics", "/v3/clusters", "/rates.json", f"/topics/{TOPIC}/tail"):
        status, headers, body = fetch(secured, path)
        assert status == 401 and headers["WWW-Authenticate"].startswith("Basic"), path
        assert TOPIC not in body, path
    status, _, body = fetch(secured, "/login")
    assert status == 200 and 'name="password"' in body and TOPIC not in body


def test_login_form_gives_a_session(secured):
    status, _, body = fetch(secured, "/login", {"user": "alice", "password": "wrong", "next": f"/topics/{TOPIC}"})
    assert status == 401 and "wrong user name or password" in body
    status, headers, _ = fetch(secured, "/login", {"user": "alice", "password": PASSWORD, "next": f"/topics/{TOPIC}"})
    assert (status, headers["Location"]) == (303, f"/topics/{TOPIC}")
    cookie = headers["Set-Cookie"].split(";")[0]
    assert "httponly" in headers["Set-Cookie"].lower() and "samesite=strict" in headers["Set-Cookie"].lower()
    status, _, body = fetch(secured, f"/topics/{TOPIC}", headers={"Cookie": cookie})
    assert status == 200 and all(value in body for value in VALUES)
    assert fetch(secured, "/login", {"user": "alice", "password": PASSWORD, "next": "//evil.example/"})[1][
        "Location"] == "/"  # no open redirect
    status, headers, _ = fetch(secured, "/logout", headers={"Cookie": cookie})
    assert status == 303
    forgotten = headers["Set-Cookie"].split(";")[0]
    assert fetch(secured, f"/topics/{TOPIC}", headers={"Cookie": forgotten})[0] == 303


def test_deleting_the_user_ends_its_session(secured):
    headers = fetch(secured, "/login", {"user": "erin", "password": PASSWORD, "next": "/"})[1]
    cookie = {"Cookie": headers["Set-Cookie"].split(";")[0]}
    assert fetch(secured, "/", headers=cookie)[0] == 200
    subprocess.run([sys.executable, "-m", "headwater", "users", "delete", "--offline", "--data-dir",
                    str(secured.data_dir), "erin"], check=True, capture_output=True)
    wait_until(lambda: fetch(secured, "/", headers=cookie)[0] == 303, timeout=30, what="erin's session to end")
    assert fetch(secured, "/metrics", headers=cookie)[0] == 401


def test_basic_credentials_for_scripts(secured):
    status, _, body = fetch(secured, "/metrics", headers=basic("alice", PASSWORD))
    assert status == 200 and f'topic="{TOPIC}"' in body
    status, _, body = fetch(secured, "/v3/clusters", headers=basic("alice", PASSWORD))
    assert status == 200 and json.loads(body)["data"]
    assert fetch(secured, "/metrics", headers=basic("alice", "wrong"))[0] == 401
    assert fetch(secured, "/metrics", headers=basic("mallory", PASSWORD))[0] == 401
    status, _, body = fetch(secured, "/metrics", headers=basic("dave", PASSWORD))  # no DESCRIBE on the cluster
    assert status == 403 and "needs DESCRIBE on the cluster" in body
    log = secured.log_file.read_text()
    assert "console login failed from 127.0.0.1 as 'alice'" in log
    assert "console login failed from 127.0.0.1 as 'mallory'" in log


def test_login_in_the_browser(secured, browser):  # noqa: F811 (the fixture)
    open_page(browser, secured, f"/topics/{TOPIC}")
    assert browser.current_url.startswith(secured.console_url + "login")
    assert not any(value in browser.page_source for value in VALUES)

    def log_in(password: str):
        browser.find_element(By.ID, "user").clear()
        browser.find_element(By.ID, "user").send_keys("alice")
        browser.find_element(By.ID, "password").send_keys(password)
        browser.find_element(By.CSS_SELECTOR, "#login button").click()
    log_in("wrong")
    error = wait_for(browser, lambda: browser.find_elements(By.ID, "login-error"), "the login error")
    assert "wrong user name or password" in error[0].text
    log_in(PASSWORD)
    wait_for(browser, lambda: browser.current_url.endswith(f"/topics/{TOPIC}"), "the topic page")
    wait_for(browser, lambda: all(value in browser.page_source for value in VALUES), "the topic's records")


def test_over_https_the_console_needs_the_certificate_and_its_cookie_is_secure(tmp_path):
    certs, data = tmp_path / "certs", tmp_path / "data"
    for args in (["certs", "--out", str(certs)],
                 ["users", "create", "--offline", "--data-dir", str(data), "alice", "--password", PASSWORD,
                  "--iterations", "4096"]):
        subprocess.run([sys.executable, "-m", "headwater", *args], check=True, capture_output=True)
    with BrokerProcess(data, "--listener", "SASL_PLAINTEXT://127.0.0.1:0", "--http-listener", "https://127.0.0.1:0",
                       "--ssl-certfile", str(certs / "broker.pem"), "--ssl-keyfile", str(certs / "broker.key"),
                       "--super-user", "User:alice") as proc:
        assert proc.console_url.startswith("https://127.0.0.1:")
        trusted = ssl.create_default_context(cafile=certs / "ca.pem")
        https = urllib.request.build_opener(_NoRedirect, urllib.request.HTTPSHandler(context=trusted))
        basic = "Basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
        with https.open(urllib.request.Request(proc.console_url + "metrics", headers={"Authorization": basic}),
                        timeout=30) as response:
            assert response.status == 200 and "headwater_" in response.read().decode()
        form = urllib.parse.urlencode({"user": "alice", "password": PASSWORD}).encode()
        try:
            https.open(urllib.request.Request(proc.console_url + "login", data=form), timeout=30)
            raise AssertionError("a login answers with a redirect")
        except urllib.error.HTTPError as redirect:
            assert redirect.code == 303
            cookie = redirect.headers["set-cookie"]
        assert cookie.startswith("headwater_console=") and "secure" in cookie.lower()

        untrusted = urllib.request.build_opener(urllib.request.HTTPSHandler(context=ssl.create_default_context()))
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            untrusted.open(proc.console_url + "metrics", timeout=30)
        with pytest.raises((urllib.error.URLError, ConnectionError, http.client.HTTPException)):
            _http.open(proc.console_url.replace("https://", "http://") + "metrics", timeout=30).read()
        with https.open(urllib.request.Request(proc.console_url + "metrics", headers={"Authorization": basic}),
                        timeout=30) as response:
            assert response.status == 200  # still serving


def sasl(user: str, password: str = PASSWORD) -> dict:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": user,
            "sasl.password": password}


def admin_client(broker, user: str = "alice", password: str = PASSWORD) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap, **sasl(user, password)})


def acls_described(broker) -> set[tuple]:
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                  AclPermissionType.ANY)
    admin = admin_client(broker)   # held until the answer: a collected client ends its requests
    return {(a.restype.name, a.name, a.resource_pattern_type.name, a.principal, a.host, a.operation.name,
             a.permission_type.name) for a in admin.describe_acls(everything).result(30)}


def users_described(broker) -> dict[str, list[tuple[str, int]]]:
    admin = admin_client(broker)
    described = admin.describe_user_scram_credentials().result(30)
    return {user: [(info.mechanism.name.replace("_", "-"), info.iterations) for info in d.scram_credential_infos]
            for user, d in described.items()}


def log_in_as(browser, broker, user: str) -> None:  # noqa: F811 (the fixture)
    open_page(browser, broker, "/logout")
    browser.find_element(By.ID, "user").send_keys(user)
    browser.find_element(By.ID, "password").send_keys(PASSWORD)
    browser.find_element(By.CSS_SELECTOR, "#login button").click()
    wait_for(browser, lambda: not browser.current_url.startswith(broker.console_url + "login"), f"{user}'s login")


def main_text(browser) -> str:  # noqa: F811 (the fixture)
    return browser.find_element(By.TAG_NAME, "main").text


def test_acl_and_user_pages_for_an_allowed_user(secured, browser):  # noqa: F811 (the fixture)
    log_in_as(browser, secured, "alice")
    for acl in ({"resource_type": "CLUSTER", "principal": "User:dave", "operation": "DESCRIBE"},
                {"resource_type": "TOPIC", "resource_name": TOPIC, "principal": "User:dave", "operation": "READ"}):
        open_page(browser, secured, "/acls")
        submit(browser, "create-acl", acl, then="acls")
    assert acls_described(secured) == {("BROKER", "kafka-cluster", "LITERAL", "User:dave", "*", "DESCRIBE", "ALLOW"),
                                       ("TOPIC", TOPIC, "LITERAL", "User:dave", "*", "READ", "ALLOW")}
    assert sorted(r[:7] for r in rows(browser, "acls")) == [
        ["CLUSTER", "kafka-cluster", "LITERAL", "User:dave", "*", "DESCRIBE", "ALLOW"],
        ["TOPIC", TOPIC, "LITERAL", "User:dave", "*", "READ", "ALLOW"]]
    row = next(r for r in browser.find_elements(By.CSS_SELECTOR, "#acls tbody tr") if "READ" in r.text)
    row.find_element(By.TAG_NAME, "button").click()
    WebDriverWait(browser, 30).until(staleness_of(row), message="the ACLs page again")
    assert len(rows(browser, "acls")) == 1
    assert acls_described(secured) == {("BROKER", "kafka-cluster", "LITERAL", "User:dave", "*", "DESCRIBE", "ALLOW")}

    open_page(browser, secured, "/users")
    submit(browser, "create-user", {"name": "frank", "password": PASSWORD, "mechanism": "SCRAM-SHA-512"}, then="users")
    assert users_described(secured)["frank"] == [("SCRAM-SHA-512", 8192)]
    assert [r[:2] for r in rows(browser, "users") if r[0] == "frank"] == [["frank", "SCRAM-SHA-512 (8192 iterations)"]]
    frank = {"bootstrap.servers": secured.bootstrap, **sasl("frank"), "sasl.mechanism": "SCRAM-SHA-512"}
    assert AdminClient(frank).list_topics(timeout=30).cluster_id is not None   # frank logs in with that password
    row = next(r for r in browser.find_elements(By.CSS_SELECTOR, "#users tbody tr") if r.text.startswith("frank"))
    row.find_element(By.TAG_NAME, "button").click()
    WebDriverWait(browser, 30).until(staleness_of(row), message="the users page again")
    assert "frank" not in [r[0] for r in rows(browser, "users")]
    assert "frank" not in users_described(secured)


def test_acl_and_user_changes_refused_for_a_user_without_alter_on_the_cluster(secured, browser):  # noqa: F811
    before = acls_described(secured)
    assert ("BROKER", "kafka-cluster", "LITERAL", "User:dave", "*", "DESCRIBE", "ALLOW") in before  # may log in
    log_in_as(browser, secured, "dave")
    open_page(browser, secured, "/acls")
    assert rows(browser, "acls")   # dave may see them: DESCRIBE on the cluster
    submit(browser, "create-acl", {"resource_type": "TOPIC", "resource_name": TOPIC, "principal": "User:dave",
                                   "operation": "ALL"}, then="acls")
    assert "Error 403" in main_text(browser) and "CLUSTER_AUTHORIZATION_FAILED" in main_text(browser)
    assert acls_described(secured) == before
    open_page(browser, secured, "/users")
    submit(browser, "create-user", {"name": "mallory", "password": PASSWORD}, then="users")
    assert "Error 403" in main_text(browser) and "CLUSTER_AUTHORIZATION_FAILED" in main_text(browser)
    assert "mallory" not in users_described(secured)
    open_page(browser, secured, f"/topics/{TOPIC}")
    submit(browser, "produce", {"value": "forged"}, then="messages")
    assert f"not authorized to write to topic '{TOPIC}'" in main_text(browser)


def test_rest_produce_needs_write_on_the_topic(secured):
    cluster = json.loads(fetch(secured, "/v3/clusters", headers=basic("alice", PASSWORD))[2])["data"][0]["cluster_id"]

    def produce(user: str):
        return urllib.request.urlopen(urllib.request.Request(
            secured.console_url + f"v3/clusters/{cluster}/topics/{TOPIC}/records", method="POST",
            data=json.dumps({"value": {"type": "STRING", "data": user}}).encode(),
            headers={"Content-Type": "application/json", **basic(user, PASSWORD)}), timeout=30)
    with pytest.raises(urllib.error.HTTPError) as refused:
        produce("dave")   # DESCRIBE on the cluster lets him in, but he has no WRITE on the topic
    assert refused.value.code == 403 and "TOPIC_AUTHORIZATION_FAILED" in refused.value.read().decode()
    with produce("alice") as response:
        assert json.loads(response.read())["offset"] >= len(VALUES)


def test_resetting_offsets_needs_read_on_the_group_and_the_topic(secured):
    alice = {"bootstrap.servers": secured.bootstrap, "security.protocol": "SASL_PLAINTEXT",
             "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice", "sasl.password": PASSWORD}
    group, end = "ledger-auditors", TopicPartition(TOPIC, 0, len(VALUES))
    consumer = Consumer({**alice, "group.id": group})
    consumer.commit(offsets=[end], asynchronous=False)
    consumer.close()
    admin = AdminClient(alice)
    bindings = [AclBinding(resource, name, ResourcePatternType.LITERAL, "User:dave", "*", operation,
                           AclPermissionType.ALLOW)
                for resource, name, operation in ((ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE),
                                                  (ResourceType.GROUP, group, AclOperation.READ))]
    for future in admin.create_acls(bindings).values():
        future.result(30)

    def reset(user: str):
        return fetch(secured, f"/groups/{group}/reset", {"topic": TOPIC, "to": "earliest", "confirm": "yes"},
                     headers=basic(user, PASSWORD))

    def committed() -> int:
        reader = Consumer({**alice, "group.id": group})
        try:
            return reader.committed([TopicPartition(TOPIC, 0)], timeout=30)[0].offset
        finally:
            reader.close()

    status, _, body = reset("dave")   # READ on the group, none on the topic
    assert status == 403 and "TOPIC_AUTHORIZATION_FAILED" in body
    assert committed() == len(VALUES)
    status, _, body = reset("alice")
    assert status == 303, body
    assert committed() == 0
    for future in admin.delete_acls([AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal,
                                                      b.host, b.operation, b.permission_type)
                                     for b in bindings]).values():
        future.result(30)


def test_schema_registry_needs_a_login_and_write_on_schemas_to_change(secured):
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    admin = AdminClient({"bootstrap.servers": secured.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice", "sasl.password": PASSWORD})
    describe = AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:dave", "*",
                          AclOperation.DESCRIBE, AclPermissionType.ALLOW)
    write = AclBinding(ResourceType.TOPIC, "_schemas", ResourcePatternType.LITERAL, "User:dave", "*",
                       AclOperation.WRITE, AclPermissionType.ALLOW)

    def registry(user: str | None) -> SchemaRegistryClient:
        login = {"basic.auth.user.info": f"{user}:{PASSWORD}"} if user else {}
        return SchemaRegistryClient({"url": secured.console_url, "max.retries": 0, **login})

    def refused(call, *args) -> tuple[int, int]:
        with pytest.raises(SchemaRegistryError) as caught:
            call(*args)
        return caught.value.http_status_code, caught.value.error_code

    schema = Schema('"string"', "AVRO")
    assert refused(registry(None).get_subjects)[0] == 401
    schema_id = registry("alice").register_schema("ledger-value", schema)
    admin.create_acls([describe])[describe].result(30)
    assert registry("dave").get_subjects() == ["ledger-value"]          # DESCRIBE on the cluster lets him read
    assert refused(registry("dave").register_schema, "dave-value", schema) == (403, 40301)
    assert refused(registry("dave").delete_subject, "ledger-value") == (403, 40301)
    admin.create_acls([write])[write].result(30)
    try:
        assert registry("dave").register_schema("dave-value", schema) == schema_id   # the same schema, one id
    finally:
        admin.delete_acls([AclBindingFilter(write.restype, write.name, write.resource_pattern_type, write.principal,
                                            write.host, write.operation, write.permission_type)])

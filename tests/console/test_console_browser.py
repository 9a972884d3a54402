"""The web console in a real browser (headless Chromium, driven by selenium) against a real
3-node cluster with auth on: one broker group (a master, two slaves) and three Raft voters,
started once for the module. Every page is drawn from the cluster's real data, every action
is checked afterwards through the SDK, and untrusted strings are shown as text: a payload
that would set ``window.__xss`` never runs."""

from __future__ import annotations

import base64
import datetime
import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.common.by import By

from ferrymq.client import Admin, Message, Producer, SimpleConsumer
from ferrymq.client.admin import AclRule
from ferrymq.codec.commitlog_record import decode
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from ferrymq.launcher.cluster import cluster_down, cluster_up
from ferrymq.launcher.polling import until
from ferrymq.protocol.ferrymq import admin_pb2 as admin_api
from tests.support.cluster import SMALL_STORE
from tests.support.console import (
    CONSOLE_SETTINGS,
    ROOT,
    ConsoleClient,
    browser,
    console_of,
    screenshot,
)
from tests.support.remoting_client import (
    RemotingClient,
    answer_direct_consumption,
    heartbeat_body,
)

XSS = "<img src=x onerror=window.__xss=1><script>window.__xss=2</script>"
XSS_CLIENT = "127.0.0.1@<img src=x onerror=window.__xss=3>"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("console-cluster"))
    plan = cluster_up(
        directory,
        nodes=3,
        auto_ports=True,
        settings={**SMALL_STORE, **CONSOLE_SETTINGS},
    )
    try:
        yield plan
    finally:
        cluster_down(directory)


@pytest.fixture(scope="module")
def driver():
    chromium = browser()
    try:
        yield chromium
    finally:
        chromium.quit()


@pytest.fixture(scope="module")
def console(cluster, driver):
    """The console of the master's node (consumer progress is the master's: a slave
    rebuilds it when promoted), logged in as the admin through the login form."""
    address = console_of(cluster, master_node(cluster))
    log_in(driver, address, "not-the-secret")
    refused = until(lambda: driver.find_element(By.ID, "login-error").text, 10, "the refusal")
    assert "wrong access key or secret key" in refused
    log_in(driver, address, ROOT.secret_key)
    until(lambda: driver.find_element(By.ID, "nav").is_displayed(), 10, "the logged-in page")
    return address


def log_in(driver, address: str, secret_key: str) -> None:
    """Through the login form of the console at ``address``, as ``root``."""
    driver.get(f"http://{address}/")
    until(lambda: driver.find_element(By.ID, "login").is_displayed(), 10, "the login form")
    for field_id, value in (("access-key", ROOT.access_key), ("secret-key", secret_key)):
        driver.find_element(By.ID, field_id).clear()
        driver.find_element(By.ID, field_id).send_keys(value)
    driver.find_element(By.ID, "login-button").click()


def master_node(cluster):
    with admin_of(cluster) as admin:
        master = admin.cluster_status().broker_groups[0].master
    return next(node for node in cluster.nodes if node.id == master)


def admin_of(cluster) -> Admin:
    return Admin(cluster.nodes[0].grpc, security=ROOT)


def rules_at(node, access_key: str) -> list[str]:
    """``access_key``'s ACL as ``node``'s own routing copy holds it ([] before it knows
    the user)."""
    with Admin(node.grpc, security=ROOT) as admin:
        users = {user.access_key: user for user in admin.list_users()}
    return [str(rule) for rule in users[access_key].acl] if access_key in users else []


def rows(driver, table_id: str) -> list[list[str]]:
    """The text of each cell of each body row of a table (re-read on each call: the page
    redraws it as it polls)."""
    found = []
    for row in driver.find_elements(By.CSS_SELECTOR, f"#{table_id} tbody tr"):
        found.append([cell.text for cell in row.find_elements(By.TAG_NAME, "td")])
    return found


def on_page(step, what: str, timeout_s: float = 15):
    """``step()``'s value once it is true, done again when the page redrew what it was
    using (a poll replaces its tables: an element found before is then stale) or had not
    drawn it yet."""

    def attempt():
        try:
            value = step()
        except (StaleElementReferenceException, NoSuchElementException):
            return None
        return (value,) if value else None

    return until(attempt, timeout_s, what)[0]


def stable_rows(driver, table_id: str, condition) -> list[list[str]]:
    """The table's rows once ``condition(rows)`` holds."""

    def read():
        found = rows(driver, table_id)
        return (found,) if condition(found) else None  # a tuple: no rows is an answer too

    return on_page(read, f"table {table_id}")[0]


def click(driver, selector: str, what: str) -> None:
    """Clicks the element once it is there and enabled (found again after a redraw)."""

    def step():
        element = driver.find_element(By.CSS_SELECTOR, selector)
        if not element.is_enabled():
            return False
        element.click()
        return True

    on_page(step, what)


def test_cluster_page_shows_the_cluster_as_the_sdk_sees_it(cluster, driver, console):
    driver.get(f"http://{console}/#/cluster")
    nodes = stable_rows(driver, "nodes", lambda r: len(r) == 3)
    with admin_of(cluster) as admin:
        status = admin.cluster_status()
    shown = {row[0]: row for row in nodes}
    for node in status.nodes:
        row = shown[node.id]
        assert row[1] == node.broker_group
        assert row[2] == node.role
        assert row[3] == ("up" if node.alive else "down")
        assert row[7] == "no"  # no damaged log
        assert row[8] == node.software_version
        assert row[10] == node.address
    groups = stable_rows(driver, "broker-groups", lambda r: len(r) == 1)
    group = status.broker_groups[0]
    assert groups[0][0] == group.name and groups[0][1] == group.master
    assert groups[0][2] == str(group.epoch)
    assert groups[0][3] == ", ".join(sorted(group.in_sync))
    voters = stable_rows(driver, "voters", lambda r: len(r) == 3)
    assert {row[0] for row in voters} == {v.address for v in status.voters}
    assert [row[0] for row in voters if row[2] == "leader"] == [status.raft_leader]


def test_cluster_page_shows_a_nodes_configuration_read_at_that_node(cluster, driver, console):
    """A slave's Configuration, from the master's console: read at the slave (its Admin
    NodeConfig, as the console's user), as the SDK reads it there; secrets only as set."""
    slave = next(node for node in cluster.nodes if node.id != master_node(cluster).id)
    driver.get(f"http://{console}/#/cluster")
    stable_rows(driver, "nodes", lambda r: len(r) == 3)
    click(driver, f"tr[data-node='{slave.id}'] a.node-config", "the node's Configuration link")
    on_page(lambda: driver.find_element(By.ID, "node-config-id").text == slave.id, "the view")
    options = dict(stable_rows(driver, "config-node", lambda r: len(r) == 5))
    with Admin(slave.grpc, security=ROOT) as admin:
        expected = admin.node_config()
    assert options == {s.name: s.value for s in expected.settings if s.section == "node"}
    assert options["id"] == slave.id and options["data_dir"] == slave.data
    secrets = dict(stable_rows(driver, "config-cluster", lambda r: len(r) == 5))
    assert secrets["secret"] == "set, not shown"
    assert cluster.secret not in driver.find_element(By.ID, "node-config").text
    properties = dict(stable_rows(driver, "broker-properties", lambda r: len(r) > 20))
    assert properties["brokerRole"] == "SLAVE"
    assert properties == expected.broker_properties
    # The secrets' sections, not the top: a data directory is a path of the test machine.
    driver.execute_script(
        "arguments[0].scrollIntoView(); window.scrollBy(0, -60)",
        driver.find_element(By.ID, "config-cluster"),
    )
    screenshot(driver, "node-config")


def test_topics_page_creates_updates_and_deletes_as_the_sdk_sees(cluster, driver, console):
    driver.get(f"http://{console}/#/topics")
    driver.find_element(By.ID, "new-topic-name").send_keys("console-orders")
    driver.find_element(By.ID, "new-topic-queues").clear()
    driver.find_element(By.ID, "new-topic-queues").send_keys("3")
    driver.find_element(By.CSS_SELECTOR, "#new-topic-type option[value='FIFO']").click()
    driver.find_element(By.ID, "create-topic-button").click()
    stable_rows(driver, "topic-table", lambda r: any(row[0] == "console-orders" for row in r))
    with admin_of(cluster) as admin:
        made = {t.name: t for t in admin.list_topics()}["console-orders"]
    assert made.queue_count == 3 and made.message_type == "FIFO"

    def edit():
        # The page does not redraw a table whose input is being edited.
        row = driver.find_element(By.CSS_SELECTOR, "tr[data-topic='console-orders']")
        queues = row.find_element(By.CSS_SELECTOR, "input.edit-queues")
        queues.click()
        queues.clear()
        queues.send_keys("5")
        row.find_element(By.CSS_SELECTOR, "select.edit-permission option[value='READ']").click()
        row.find_element(By.CSS_SELECTOR, "button.update-topic").click()
        return True

    on_page(edit, "the topic's row")
    stable_rows(
        driver,
        "topic-table",
        lambda r: any(row[0] == "console-orders" and row[2] == "READ" for row in r),
    )
    with admin_of(cluster) as admin:
        changed = {t.name: t for t in admin.list_topics()}["console-orders"]
    assert changed.queue_count == 5 and changed.permission == "READ"

    click(driver, "tr[data-topic='console-orders'] button.delete-topic", "the delete button")
    driver.switch_to.alert.accept()
    stable_rows(driver, "topic-table", lambda r: all(row[0] != "console-orders" for row in r))
    with admin_of(cluster) as admin:
        assert "console-orders" not in {t.name for t in admin.list_topics()}


def test_topics_page_filters_and_pages_on_the_server(cluster, driver, console):
    with admin_of(cluster) as admin:
        for i in range(60):
            admin.create_topic(f"paged-{i:03d}", 1)
    driver.get(f"http://{console}/#/topics")
    driver.find_element(By.ID, "topic-filter").send_keys("paged-")
    on_page(
        lambda: driver.find_element(By.ID, "topic-count").text.startswith("1-50 of 60"),
        "the first page of 60",
    )
    click(driver, "#topics-next", "the next page")
    on_page(
        lambda: driver.find_element(By.ID, "topic-count").text.startswith("51-60 of 60"),
        "the second page",
    )
    names = [r[0] for r in stable_rows(driver, "topic-table", lambda r: len(r) == 10)]
    assert names == [f"paged-{i:03d}" for i in range(50, 60)]


def test_an_untrusted_name_in_a_refusal_is_shown_as_text(cluster, driver, console):
    driver.get(f"http://{console}/#/topics")
    driver.find_element(By.ID, "new-topic-name").send_keys(XSS)
    driver.find_element(By.ID, "create-topic-button").click()
    notice = driver.find_element(By.ID, "notice")
    shown = on_page(lambda: "error" in notice.get_attribute("class") and notice.text, "the refusal")
    assert XSS in shown  # the service's reason quotes the name: as characters
    assert not driver.find_elements(By.CSS_SELECTOR, "#notice img, #notice script")
    assert driver.execute_script("return window.__xss === undefined;")


@pytest.fixture(scope="module")
def work(cluster) -> int:
    """Topic ``console-work`` with 10 messages and group ``console-readers`` holding some
    of them in flight for 5 minutes (how many: the answer), for every test that reads
    them, whichever runs first."""
    first = master_node(cluster)
    with admin_of(cluster) as admin:
        admin.create_topic("console-work", 2)
        admin.create_group("console-readers")
    with Producer(first.grpc, security=ROOT) as producer:
        for i in range(10):
            producer.send(Message("console-work", f"work {i}".encode()))
    with SimpleConsumer(first.grpc, "console-readers", "console-work", security=ROOT) as c:
        held = until(lambda: c.receive(4, invisible_s=300, wait_s=1), 10, "messages to hold")
    return len(held)


MAIL_BODY = json.dumps({"html": XSS, "n": 1}).encode()


@pytest.fixture(scope="module")
def mail(cluster):
    """Topic ``console-mail`` with one message of untrusted content, key ``order-7``
    (the answer: its send's receipt)."""
    with admin_of(cluster) as admin:
        admin.create_topic("console-mail", 1)
    message = Message(
        "console-mail", MAIL_BODY, tag="t1", keys=["order-7"], properties={"note": XSS}
    )
    with Producer(master_node(cluster).grpc, security=ROOT) as producer:
        return producer.send(message)


def test_groups_page_shows_members_lag_in_flight_and_deletes(cluster, driver, console, work):
    first = master_node(cluster)
    with admin_of(cluster) as admin:
        admin.create_group("console-leaving")
    # A 4.x client that says who it is, under a client id a page must show as text.
    with RemotingClient(first.remoting, security=ROOT) as client:
        body = heartbeat_body(XSS_CLIENT, ("console-readers",), "console-work", producer=False)
        assert client.call(RequestCode.HEART_BEAT, {}, body).code == 0
        driver.get(f"http://{console}/#/groups/console-readers")
        members = stable_rows(driver, "group-members", lambda r: len(r) == 1)
    assert members[0][0] == XSS_CLIENT
    assert members[0][2] == "JAVA" and members[0][3] == "407"
    assert members[0][1].startswith("127.0.0.1:")
    with admin_of(cluster) as admin:
        progress = admin.group_progress("console-readers", "console-work")
    lag, in_flight = sum(q.lag for q in progress), sum(q.in_flight for q in progress)
    assert (lag, in_flight) == (10, work)
    assert driver.find_element(By.ID, "group-lag").text == str(lag)
    assert driver.find_element(By.ID, "group-in-flight").text == str(in_flight)
    queues = stable_rows(driver, "group-queues", lambda r: len(r) == 2)
    assert sorted(int(row[5]) for row in queues) == sorted(q.lag for q in progress)
    listed = stable_rows(
        driver, "group-table", lambda r: any(row[0] == "console-readers" for row in r)
    )
    row = next(row for row in listed if row[0] == "console-readers")
    assert row[2:4] == [str(lag), str(in_flight)]
    assert driver.execute_script("return window.__xss === undefined;")
    screenshot(driver, "groups")

    driver.find_element(By.ID, "new-group-name").send_keys("console-made")
    attempts = driver.find_element(By.ID, "new-group-attempts")
    attempts.clear()
    attempts.send_keys("3")
    driver.find_element(By.ID, "new-group-fifo").click()
    click(driver, "#create-group-button", "the create button")
    stable_rows(driver, "group-table", lambda r: any(row[0] == "console-made" for row in r))
    with admin_of(cluster) as admin:
        made = {g.name: g for g in admin.list_groups()}["console-made"]
    assert (made.max_delivery_attempts, made.fifo) == (3, True)

    click(driver, "tr[data-group='console-leaving'] button.delete-group", "the delete button")
    driver.switch_to.alert.accept()
    stable_rows(driver, "group-table", lambda r: all(row[0] != "console-leaving" for row in r))
    with admin_of(cluster) as admin:
        assert "console-leaving" not in {g.name for g in admin.list_groups()}


def test_groups_page_edits_a_group_in_place_as_the_sdk_then_sees(cluster, driver, console):
    """The Edit form of a group's details: filled from the group, saved through
    ``PUT /api/groups/<name>``, and the change read back through the SDK and on the page;
    what the form did not change stays."""
    with admin_of(cluster) as admin:
        admin.create_group("console-edited", max_delivery_attempts=16, lite_exclusive=True)

    def config() -> tuple[int, bool, bool]:
        with admin_of(cluster) as admin:
            group = {g.name: g for g in admin.list_groups()}["console-edited"]
        return group.max_delivery_attempts, group.fifo, group.lite_exclusive

    driver.get(f"http://{console}/#/groups/console-edited")
    on_page(lambda: driver.find_element(By.ID, "edit-group").is_displayed(), "the edit form")
    field = "edit-group-attempts"
    on_page(
        lambda: driver.find_element(By.ID, field).get_attribute("value") == "16",
        "the form filled from the group",
    )
    assert driver.find_element(By.ID, "edit-group-lite-exclusive").is_selected()
    assert not driver.find_element(By.ID, "edit-group-fifo").is_selected()
    attempts = driver.find_element(By.ID, field)
    attempts.clear()
    attempts.send_keys("5")
    driver.find_element(By.ID, "edit-group-fifo").click()
    click(driver, "#edit-group-save", "the save button")
    on_page(lambda: config() == (5, True, True), "the update seen through the SDK")
    on_page(
        lambda: driver.find_element(By.ID, "group-max-attempts").text == "5",
        "the new maximum in the group's details",
    )
    assert driver.find_element(By.ID, "group-fifo").text == "yes"
    assert "Updated consumer group console-edited." in driver.find_element(By.ID, "notice").text
    listed = stable_rows(
        driver,
        "group-table",
        lambda r: any(row[0] == "console-edited" and row[6] == "5" for row in r),
    )
    assert next(row for row in listed if row[0] == "console-edited")[7] == "yes"


def test_groups_page_resets_offsets_as_the_sdk_then_sees(cluster, driver, console):
    """The reset form of a group's details: a preview changes nothing, a reset (after its
    confirmation) moves every queue, as ``Admin.group_progress`` then reads; a reset to a
    time through the same endpoint; a malformed ``to`` refused with what was wrong."""
    first = master_node(cluster)
    with admin_of(cluster) as admin:
        admin.create_topic("console-rewind", 2)
        admin.create_group("console-rewinders")
    with Producer(first.grpc, security=ROOT) as producer:
        sent = [producer.send(Message("console-rewind", f"r {i}".encode())) for i in range(6)]
    with SimpleConsumer(first.grpc, "console-rewinders", "console-rewind", security=ROOT) as c:
        read = 0
        while read < len(sent):
            got = until(lambda: c.receive(16, invisible_s=60, wait_s=1), 10, "messages")
            for message in got:
                c.ack(message)
            read += len(got)

    def lag() -> int:
        with admin_of(cluster) as admin:
            return sum(q.lag for q in admin.group_progress("console-rewinders", "console-rewind"))

    until(lambda: lag() == 0, 10, "every message acknowledged")
    driver.get(f"http://{console}/#/groups/console-rewinders")
    on_page(lambda: driver.find_element(By.ID, "reset-offsets").is_displayed(), "the reset form")
    driver.find_element(By.ID, "reset-topic").send_keys("console-rewind")
    driver.find_element(By.CSS_SELECTOR, "#reset-to option[value='earliest']").click()
    click(driver, "#reset-preview", "the preview button")
    planned = stable_rows(driver, "reset-queues", lambda r: len(r) == 2)
    assert sorted(int(row[3]) for row in planned) == [0, 0]
    assert sum(int(row[2]) for row in planned) == len(sent)
    assert lag() == 0  # a preview changes nothing
    click(driver, "#reset-apply", "the reset button")
    driver.switch_to.alert.accept()
    on_page(lambda: lag() == len(sent), "the reset seen through the SDK")
    on_page(lambda: driver.find_element(By.ID, "group-lag").text == str(len(sent)), "the lag")

    client = ConsoleClient(console)
    assert client.login(ROOT).status == 200
    with admin_of(cluster) as admin:
        (found,) = admin.query_by_id(sent[3].message_id, "console-rewind")
    at = found.store_timestamp_ms + 1  # just after the 4th message's store time
    answer = client.request(
        "POST", "/api/groups/console-rewinders/reset", {"topic": "console-rewind", "to": at}
    )
    assert answer.status == 200, answer.body
    assert lag() < len(sent)
    refused = client.request(
        "POST", "/api/groups/console-rewinders/reset", {"topic": "console-rewind", "to": "soon"}
    )
    assert refused.status == 400 and "earliest" in refused.body["error"]
    client.close()


def test_messages_page_finds_by_key_id_and_offset_and_shows_untrusted_content_as_text(
    cluster, driver, console, work, mail
):
    body, receipt = MAIL_BODY, mail
    driver.get(f"http://{console}/#/messages")
    driver.find_element(By.ID, "message-topic").send_keys("console-mail")
    driver.find_element(By.ID, "message-key").send_keys("order-7")
    click(driver, "#message-find", "the find button")
    card = on_page(
        lambda: driver.find_element(By.CSS_SELECTOR, ".message"), "the message found by key"
    )
    assert card.get_attribute("data-message-id") == receipt.message_id
    shown_body = card.find_element(By.CSS_SELECTOR, "pre.message-body").text
    assert shown_body == body.decode()
    properties = {
        row.find_element(By.CSS_SELECTOR, ".property-name").text: row.find_element(
            By.CSS_SELECTOR, ".property-value"
        ).text
        for row in card.find_elements(By.CSS_SELECTOR, ".message-properties tbody tr")
    }
    assert properties["note"] == XSS
    stored = card.find_element(By.CSS_SELECTOR, ".message-stored").text
    assert "group-1" in stored and "CommitLog offset" in stored
    card.find_element(By.CSS_SELECTOR, "select.body-format option[value='json']").click()
    assert json.loads(card.find_element(By.CSS_SELECTOR, "pre.message-body").text) == {
        "html": XSS,
        "n": 1,
    }
    screenshot(driver, "messages")
    card.find_element(By.CSS_SELECTOR, "select.body-format option[value='hex']").click()
    hex_text = card.find_element(By.CSS_SELECTOR, "pre.message-body").text
    assert hex_text.startswith("00000000  7b 22 68 74 6d 6c 22")
    assert not driver.find_elements(
        By.CSS_SELECTOR, "#message-results img, #message-results script"
    )
    assert driver.execute_script("return window.__xss === undefined;")

    driver.find_element(By.CSS_SELECTOR, "#message-search option[value='id']").click()
    driver.find_element(By.ID, "message-id").send_keys(receipt.message_id)
    click(driver, "#message-find", "the find button")
    on_page(
        lambda: (
            driver.find_element(By.ID, "message-count").text.startswith("1 message")
            and driver.find_element(By.CSS_SELECTOR, ".message").get_attribute("data-message-id")
            == receipt.message_id
        ),
        "the message found by id",
    )
    driver.find_element(By.CSS_SELECTOR, "#message-search option[value='offset']").click()
    offset = driver.find_element(By.ID, "message-offset")
    offset.clear()
    offset.send_keys(str(receipt.queue_offset))
    click(driver, "#message-find", "the find button")
    on_page(
        lambda: (
            driver.find_element(By.CSS_SELECTOR, ".message").get_attribute("data-message-id")
            == receipt.message_id
        ),
        "the message found at its offset",
    )
    # The topics page with a topic's queues, as the SDK reads them.
    driver.get(f"http://{console}/#/topics/console-work")
    driver.find_element(By.ID, "topic-filter").send_keys("console-")
    listed = stable_rows(
        driver, "topic-table", lambda r: {"console-work", "console-mail"} <= {x[0] for x in r}
    )
    assert next(row for row in listed if row[0] == "console-work")[4] == "10"
    with admin_of(cluster) as admin:
        _, queues = admin.describe_topic("console-work")
    shown = stable_rows(driver, "topic-queues", lambda r: len(r) == 2)
    assert [[int(cell.replace(",", "")) for cell in row[1:4]] for row in shown] == [
        [q.queue_id, q.min_offset, q.max_offset] for q in queues
    ]
    screenshot(driver, "topics")


def test_users_page_creates_grants_revokes_and_deletes_as_the_sdk_sees(cluster, driver, console):
    driver.get(f"http://{console}/#/users")
    driver.find_element(By.ID, "new-user-access-key").send_keys("console-user")
    driver.find_element(By.ID, "new-user-secret-key").send_keys("console-user-secret")
    click(driver, "#create-user-button", "the create button")
    stable_rows(driver, "user-table", lambda r: any(row[0] == "console-user" for row in r))

    def grant():
        row = driver.find_element(By.CSS_SELECTOR, "tr[data-user='console-user']")
        row.find_element(By.CSS_SELECTOR, "select.grant-action option[value='SUBSCRIBE']").click()
        row.find_element(By.CSS_SELECTOR, "input.grant-pattern").send_keys("orders-*")
        row.find_element(By.CSS_SELECTOR, "button.grant").click()
        return True

    on_page(grant, "the grant form")
    stable_rows(
        driver,
        "user-table",
        lambda r: any(row[0] == "console-user" and "orders-*" in row[2] for row in r),
    )
    with admin_of(cluster) as admin:
        user = {u.access_key: u for u in admin.list_users()}["console-user"]
    assert [str(rule) for rule in user.acl] == ["allow subscribe topic:orders-*"]
    assert not user.admin
    screenshot(driver, "users")
    click(driver, "tr[data-user='console-user'] button.revoke", "the revoke button")
    stable_rows(
        driver,
        "user-table",
        lambda r: any(row[0] == "console-user" and row[2] == "none" for row in r),
    )
    click(driver, "tr[data-user='console-user'] button.delete-user", "the delete button")
    driver.switch_to.alert.accept()
    stable_rows(driver, "user-table", lambda r: all(row[0] != "console-user" for row in r))
    with admin_of(cluster) as admin:
        assert "console-user" not in {u.access_key for u in admin.list_users()}


def test_the_page_cannot_read_its_cookie_nor_change_anything_without_its_token(
    cluster, driver, console
):
    driver.get(f"http://{console}/#/cluster")
    stable_rows(driver, "nodes", lambda r: len(r) == 3)
    assert "ferrymq_console" not in driver.execute_script("return document.cookie;")
    statuses = driver.execute_async_script(
        """
        const done = arguments[arguments.length - 1];
        const body = JSON.stringify({name: "csrf-from-page", queue_count: 1});
        const post = (headers) => fetch("/api/topics", {method: "POST", body,
            headers: Object.assign({"Content-Type": "application/json"}, headers)})
            .then((r) => r.status);
        Promise.all([post({}), post({"X-CSRF-Token": "forged"}),
                     fetch("/api/topics", {credentials: "omit"}).then((r) => r.status)])
            .then(done);
        """
    )
    assert statuses == [403, 403, 401]
    with admin_of(cluster) as admin:
        assert "csrf-from-page" not in {t.name for t in admin.list_topics()}


def test_a_slaves_console_reads_each_broker_groups_store_at_its_master(
    cluster, console, work, mail
):
    """Offsets, progress and messages are read at the master (a slave rebuilds its
    progress tables only when promoted): a slave's console shows what the SDK does."""
    master = master_node(cluster)
    slave = next(node for node in cluster.nodes if node.id != master.id)
    client = ConsoleClient(console_of(cluster, slave))
    assert client.login(ROOT).status == 200
    with admin_of(cluster) as admin:
        progress = admin.group_progress("console-readers", "console-work")
        _, queues = admin.describe_topic("console-work")
    group = client.request("GET", "/api/groups/console-readers").body
    assert (group["lag"], group["in_flight"]) == (
        sum(q.lag for q in progress),
        sum(q.in_flight for q in progress),
    )
    topic = client.request("GET", "/api/topics/console-work").body
    assert [(q["queue_id"], q["min_offset"], q["max_offset"]) for q in topic["queue_offsets"]] == [
        (q.queue_id, q.min_offset, q.max_offset) for q in queues
    ]
    found = client.request("GET", "/api/messages?topic=console-mail&key=order-7").body
    assert [m["stored"]["node"] for m in found["messages"]] == [master.id]
    assert json.loads(base64.b64decode(found["messages"][0]["body_base64"]))["html"] == XSS
    client.close()


def test_a_slaves_console_hands_a_test_message_to_the_master_as_its_user(cluster):
    """A slave takes no writes: its console hands the test message to the master's
    Messaging door signed as the logged-in user, whose send service decides on that user
    (PUBLISH on the topic) and stores it where the answer says, as the SDK then finds."""
    master = master_node(cluster)
    slave = next(node for node in cluster.nodes if node.id != master.id)
    sender = type(ROOT)("console-sender", "console-sender-secret")
    with admin_of(cluster) as admin:
        admin.create_topic("console-handed", 2)
        admin.create_topic("console-handed-fifo", 2, message_type="FIFO")
        admin.create_topic("console-unpublished", 1)
        admin.create_user(sender.access_key, sender.secret_key)
        for topic in ("console-handed", "console-handed-fifo"):
            admin.grant(sender.access_key, AclRule("ALLOW", "PUBLISH", "TOPIC", topic))
    # The master decides on the user with its own routing copy, which applies a committed
    # change a heartbeat round after the node that made it.
    until(lambda: len(rules_at(master, sender.access_key)) == 2, 10, "the grants at the master")
    client = ConsoleClient(console_of(cluster, slave))
    assert client.login(sender).status == 200
    answer = client.request(
        "POST", "/api/topics/console-handed/messages", {"body": "handed", "keys": ["h-1"]}
    )
    assert answer.status == 200, answer
    sent = answer.body
    assert (sent["node"], sent["broker_group"]) == (master.id, master.group)
    with admin_of(cluster) as admin:
        (found,) = admin.query_by_id(sent["message_id"], "console-handed")
    assert (found.queue_id, found.queue_offset) == (sent["queue_id"], sent["queue_offset"])
    assert (found.body, found.keys) == (b"handed", ["h-1"])
    refused = client.request("POST", "/api/topics/console-unpublished/messages", {"body": "x"})
    assert refused.status == 403 and refused.body == {
        "error": "FORBIDDEN: user console-sender has no publish permission on topic "
        "console-unpublished"
    }
    no_group = client.request("POST", "/api/topics/console-handed-fifo/messages", {"body": "x"})
    assert no_group.status == 400 and no_group.body == {
        "error": "ILLEGAL_MESSAGE_GROUP: FIFO messages need a message_group"
    }
    with admin_of(cluster) as admin:
        assert sum(q.max_offset for q in admin.describe_topic("console-unpublished")[1]) == 0
        assert sum(q.max_offset for q in admin.describe_topic("console-handed-fifo")[1]) == 0
    client.close()


def test_topics_page_sends_a_test_message_the_sdk_then_finds(cluster, driver, console):
    """The topic page's *Send a test message*: what the page answers is where the SDK
    finds it, its body shown as text; a refusal is the send service's, shown as such."""
    with admin_of(cluster) as admin:
        admin.create_topic("console-sent-page", 2)
    driver.get(f"http://{console}/#/topics/console-sent-page")
    on_page(lambda: driver.find_element(By.ID, "send-message").is_displayed(), "the send form")
    driver.find_element(By.ID, "send-tag").send_keys("TagS")
    driver.find_element(By.ID, "send-keys").send_keys("page-1 page-2")
    driver.find_element(By.ID, "send-body").send_keys(XSS)
    click(driver, "#send-button", "the send button")
    shown = on_page(
        lambda: (
            driver.find_element(By.ID, "send-result").text.startswith("Sent: ")
            and driver.find_element(By.ID, "send-result").text
        ),
        "the answer",
    )
    message_id = shown.split("message id ", 1)[1].split(",", 1)[0]
    with admin_of(cluster) as admin:
        (found,) = admin.query_by_id(message_id, "console-sent-page")
    assert (found.body, found.tag, found.keys) == (XSS.encode(), "TagS", ["page-1", "page-2"])
    assert shown == (
        f"Sent: message id {message_id}, broker group {found.broker_group}, queue "
        f"{found.queue_id}, offset {found.queue_offset}."
    )
    assert driver.execute_script("return window.__xss === undefined;")
    driver.find_element(By.ID, "send-body").clear()
    click(driver, "#send-button", "the send button")
    on_page(
        lambda: (
            driver.find_element(By.ID, "send-result").text
            == "Not sent: MESSAGE_BODY_EMPTY: message body is empty"
        ),
        "the refusal",
    )
    with admin_of(cluster) as admin:
        assert sum(q.max_offset for q in admin.describe_topic("console-sent-page")[1]) == 1


def traced_message(cluster, topic: str, group: str):
    """A message of ``topic`` received by ``group`` through the SDK, its invisibility
    shortened (a nack), received again and acked: its receipt and the SDK's deliveries."""
    with admin_of(cluster) as admin:
        admin.create_topic(topic, 1)
        admin.create_group(group)
    with Producer(master_node(cluster).grpc, security=ROOT) as producer:
        receipt = producer.send(Message(topic, b"traced", keys=[f"{topic}-key"]))
    with SimpleConsumer(cluster.nodes[0].grpc, group, topic, security=ROOT) as consumer:
        (first,) = until(lambda: consumer.receive(1, invisible_s=300, wait_s=1), 10, "a message")
        consumer.change_invisible_duration(first, 1)
        (second,) = until(lambda: consumer.receive(1, invisible_s=300, wait_s=1), 20, "again")
        consumer.ack(second)
    assert first.message_id == second.message_id == receipt.message_id
    return receipt, [first, second]


def test_a_message_history_shows_what_the_sdk_did(cluster, driver, console):
    """The history panel of a found message, against the SDK's own steps: delivered,
    its invisibility changed, delivered again (attempt 2), acked."""
    receipt, (first, second) = traced_message(cluster, "console-traced", "console-tracers")
    driver.get(f"http://{console}/#/messages")
    driver.find_element(By.ID, "message-topic").send_keys("console-traced")
    driver.find_element(By.ID, "message-key").send_keys("console-traced-key")
    click(driver, "#message-find", "the find button")
    card = on_page(lambda: driver.find_element(By.CSS_SELECTOR, ".message"), "the message")
    assert card.get_attribute("data-message-id") == receipt.message_id
    click(driver, ".message .history-refresh", "the history button")
    panel = on_page(
        lambda: driver.find_element(
            By.CSS_SELECTOR, ".history-group[data-group='console-tracers']"
        ),
        "the group's history",
    )
    assert panel.find_element(By.CSS_SELECTOR, ".history-state").text == (
        "consumed: acked at attempt 2"
    )
    events = [
        [c.text for c in row.find_elements(By.TAG_NAME, "td")]
        for row in panel.find_elements(By.CSS_SELECTOR, ".history-events tbody tr")
    ]
    assert [(e[1], e[2]) for e in events] == [
        ("delivered", "1"),
        ("invisibility changed", "1"),
        ("delivered", "2"),
        ("acked", "2"),
    ]
    assert (first.delivery_attempt, second.delivery_attempt) == (1, 2)
    with admin_of(cluster) as admin:
        history = admin.message_history("console-traced", 0, first.queue_offset)
    (sdk_group,) = history.groups
    assert [e.kind for e in sdk_group.events] == [e[1] for e in events]
    shown_times = [e[0] for e in events]
    assert shown_times == [
        datetime.datetime.fromtimestamp(e.time_ms / 1000, datetime.UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
        for e in sdk_group.events
    ]
    history_panel = driver.find_element(By.CSS_SELECTOR, ".message-history")
    driver.execute_script("arguments[0].scrollIntoView();", history_panel)
    screenshot(driver, "message-history")
    # Refreshed on demand: a new group's delivery shows on the next press.
    with SimpleConsumer(
        cluster.nodes[0].grpc, "console-late-tracers", "console-traced", security=ROOT
    ) as consumer:
        until(lambda: consumer.receive(1, invisible_s=300, wait_s=1), 10, "a late delivery")
    click(driver, ".message .history-refresh", "the history button, again")
    late = on_page(
        lambda: driver.find_element(
            By.CSS_SELECTOR, ".history-group[data-group='console-late-tracers'] .history-state"
        ),
        "the late group's history",
    )
    assert late.text.startswith("in flight: attempt 1, invisible until ")


def test_a_message_is_resent_to_a_group_and_its_clients_answer_is_shown(cluster, driver, console):
    """A found message's "Resend to a group": a 4.x push consumer of the group (a raw
    client on a slave, answering as the Java client does) gets it directly, and its answer
    is shown; nothing is stored (``node/console/direct_consume.py``)."""
    with admin_of(cluster) as admin:
        admin.create_topic("console-verified", 1)
        admin.create_group("console-verifiers")
    with Producer(master_node(cluster).grpc, security=ROOT) as producer:
        receipt = producer.send(Message("console-verified", b"verify me", keys=["verify-key"]))
    slave = next(node for node in cluster.nodes if node.id != master_node(cluster).id)
    heartbeat = heartbeat_body("verifier@1", ["console-verifiers"], "console-verified")
    with RemotingClient(slave.remoting, security=ROOT) as client, ThreadPoolExecutor(1) as pool:
        assert client.call(RequestCode.HEART_BEAT, body=heartbeat).code == ResponseCode.SUCCESS
        driver.get(f"http://{console}/#/messages")
        for field_id, value in (
            ("message-topic", "console-verified"),
            ("message-key", "verify-key"),
        ):
            driver.find_element(By.ID, field_id).clear()  # an earlier search's stay typed
            driver.find_element(By.ID, field_id).send_keys(value)
        click(driver, "#message-find", "the find button")
        card = on_page(lambda: driver.find_element(By.CSS_SELECTOR, ".message"), "the message")
        assert card.get_attribute("data-message-id") == receipt.message_id
        card.find_element(By.CSS_SELECTOR, ".resend-group").send_keys("console-verifiers")
        answering = pool.submit(answer_directly, client)
        click(driver, ".message .resend-send", "the resend button")
        assert answering.result(timeout=30) == b"verify me"
        shown = on_page(
            lambda: driver.find_element(By.CSS_SELECTOR, ".resend-outcome").text, "the answer"
        )
    assert shown.startswith("consumed CR_SUCCESS from client verifier@1 (remoting, connected to ")
    assert f"connected to {slave.id})" in shown
    panel = driver.find_element(By.CSS_SELECTOR, ".message-resend")
    driver.execute_script("arguments[0].scrollIntoView();", panel)
    screenshot(driver, "message-resend")


def answer_directly(client: RemotingClient) -> bytes:
    """The node's CONSUME_MESSAGE_DIRECTLY answered CR_SUCCESS: the body it carried."""
    asked = answer_direct_consumption(client, {"consumeResult": "CR_SUCCESS", "spentTimeMills": 2})
    return decode(asked.body, 0).body


def test_a_slave_shows_the_history_its_master_holds(cluster, console):
    """A message popped and acked at the master: a slave's console and a slave's Admin
    door both answer the master's history (a slave's POP tables are rebuilt only when it
    is promoted)."""
    _, (first, _) = traced_message(cluster, "console-traced-far", "console-far-tracers")
    master = master_node(cluster)
    slave = next(node for node in cluster.nodes if node.id != master.id)
    client = ConsoleClient(console_of(cluster, slave))
    assert client.login(ROOT).status == 200
    query = f"broker_group=group-1&topic=console-traced-far&queue=0&offset={first.queue_offset}"
    answer = client.request("GET", "/api/messages/history?" + query)
    assert answer.status == 200, answer
    assert answer.body["node"] == master.id
    (group,) = answer.body["groups"]
    assert (group["group"], group["state_text"]) == (
        "console-far-tracers",
        "consumed: acked at attempt 2",
    )
    assert [e["kind"] for e in group["events"]] == [
        "delivered",
        "invisibility changed",
        "delivered",
        "acked",
    ]
    client.close()
    with Admin(slave.grpc, security=ROOT) as admin:
        answer = admin.connection.call(
            admin.stub.MessageHistory,
            admin_api.MessageHistoryRequest(
                topic="console-traced-far", queue_id=0, offset=first.queue_offset
            ),
        )
    assert answer.status.code == 0
    assert [(g.group, g.state_text) for g in answer.groups] == [
        ("console-far-tracers", "consumed: acked at attempt 2")
    ]
    assert [e.kind for e in answer.groups[0].events] == [e["kind"] for e in group["events"]]


# ---- a group's dead letters resent (issue 42) ------------------------------------------------
def test_groups_page_resends_selected_then_all_dead_letters_as_the_sdk_then_sees(
    cluster, driver, console
):
    """The dead letters of a group on its page, a checkbox each: "Resend selected" gives
    the ticked one back to the group (its consumer receives it, attempt 1, and no other
    group), "Resend all" the rest, skipping what was resent, with the counts shown."""
    first = master_node(cluster)
    topic, group, others = "console-dlq", "console-dlq-group", "console-dlq-others"
    with admin_of(cluster) as admin:
        admin.create_topic(topic, 1)
        admin.create_group(group, max_delivery_attempts=1)
        admin.create_group(others)
    with Producer(first.grpc, security=ROOT) as producer:
        sent = [producer.send(Message(topic, f"dead {i}".encode())).message_id for i in range(3)]

    def received(name: str, count: int, invisible_s: float = 60, ack: bool = True) -> list:
        got: list = []
        with SimpleConsumer(first.grpc, name, topic, security=ROOT) as consumer:
            until(
                lambda: (
                    got.extend(consumer.receive(16, invisible_s=invisible_s, wait_s=1))
                    or len(got) >= count
                ),
                20,
                f"{count} messages for {name}",
            )
            for message in got if ack else ():
                consumer.ack(message)
        return got

    def dead_letters():
        with admin_of(cluster) as admin:
            return admin.dead_letters(group).entries

    received(others, 3)
    received(group, 3, invisible_s=1, ack=False)
    with SimpleConsumer(first.grpc, group, topic, security=ROOT) as consumer:
        until(
            lambda: (
                not consumer.receive(16, invisible_s=1, wait_s=0.2) and len(dead_letters()) == 3
            ),
            20,
            "three dead letters",
        )
    driver.get(f"http://{console}/#/groups/{group}")
    listed = stable_rows(driver, "dlq-table", lambda r: len(r) == 3)
    assert [row[2] for row in listed] == [e.message_id for e in dead_letters()]
    assert sorted(row[2] for row in listed) == sorted(sent)
    middle = dead_letters()[1]
    click(driver, f"#dlq-table input.dlq-pick[data-offset='{middle.offset}']", "a checkbox")
    click(driver, "#dlq-resend-selected", "Resend selected")
    driver.switch_to.alert.accept()
    on_page(
        lambda: driver.find_element(By.ID, "dlq-result").text.startswith("Resent 1;"),
        "the selection's count",
    )
    assert [e.resent for e in dead_letters()] == [False, True, False]
    (again,) = received(group, 1)
    assert again.message_id == middle.message_id and again.delivery_attempt == 1
    click(driver, "#dlq-resend-all", "Resend all")
    driver.switch_to.alert.accept()
    on_page(
        lambda: (
            driver.find_element(By.ID, "dlq-result").text
            == "Resent 2; 1 already resent before (skipped)."
        ),
        "the counts of resend all",
    )
    assert [e.resent for e in dead_letters()] == [True, True, True]
    rest = received(group, 2)
    assert sorted(m.message_id for m in rest) == sorted(set(sent) - {middle.message_id})
    with SimpleConsumer(first.grpc, others, topic, security=ROOT) as consumer:
        assert consumer.receive(16, invisible_s=60, wait_s=1) == []  # no other group
    marks = stable_rows(driver, "dlq-table", lambda r: [row[-1] for row in r] == ["resent"] * 3)
    assert len(marks) == 3
    screenshot(driver, "dead-letters")
    # The topic's page names both groups, as the SDK reads them at the master.
    driver.get(f"http://{console}/#/topics/{topic}")
    consuming = stable_rows(driver, "topic-consumers", lambda r: len(r) == 2)
    with admin_of(cluster) as admin:
        expected = [c.group for c in admin.topic_consumers(topic)]
    assert [row[0] for row in consuming] == expected == sorted([group, others])
    assert {row[2] for row in consuming} == {"POP"}


def test_producers_page_lists_a_4x_producer_while_it_is_connected(cluster, driver, console):
    """A 4.x client's producer group and connection on the Producers page, its name shown
    as text."""
    first = master_node(cluster)
    body = json.dumps(
        {"clientID": XSS_CLIENT, "producerDataSet": [{"groupName": "console-senders"}]}
    ).encode()
    with RemotingClient(first.remoting, security=ROOT) as client:
        assert client.call(RequestCode.HEART_BEAT, {}, body).code == 0
        driver.get(f"http://{console}/#/producers")
        listed = stable_rows(
            driver, "producer-table", lambda r: any(row[0] == "console-senders" for row in r)
        )
        screenshot(driver, "producers")
    (row,) = [row for row in listed if row[0] == "console-senders"]
    assert row[1] == XSS_CLIENT and row[3] == "JAVA" and row[4] == "407"
    assert row[5] == cluster_status_group(cluster)
    assert not driver.execute_script("return window.__xss || null;")


def cluster_status_group(cluster) -> str:
    with admin_of(cluster) as admin:
        return admin.cluster_status().broker_groups[0].name


def test_planned_failover_from_a_slaves_page_is_shown_live(cluster, driver, console):
    """From a slave's console: the master's Admin door decides, asked as the console's
    user (each console has a session of its own: its cookie is named after its port)."""
    slave = next(node for node in cluster.nodes if node.id != master_node(cluster).id)
    log_in(driver, console_of(cluster, slave), ROOT.secret_key)
    until(lambda: driver.find_element(By.ID, "nav").is_displayed(), 10, "the logged-in page")
    stable_rows(driver, "broker-groups", lambda r: len(r) == 1)
    with admin_of(cluster) as admin:
        before = admin.cluster_status().broker_groups[0]
    # A page that reloads loses this: the change must come from the page's own polling.
    driver.execute_script("window.__sameDocument = true;")
    click(driver, "button.failover", "the failover button")
    state = on_page(
        lambda: driver.find_element(By.ID, "failover-state").get_attribute("data-state"),
        "the failover's progress",
    )
    assert state in ("running", "done")
    on_page(
        lambda: (
            driver.find_element(By.ID, "failover-state").get_attribute("data-state") != "running"
        ),
        "the failover to end",
        timeout_s=60,
    )
    progress = driver.find_element(By.ID, "failover-state")
    assert progress.get_attribute("data-state") == "done", progress.text
    with admin_of(cluster) as admin:
        after = admin.cluster_status().broker_groups[0]
    assert after.master != before.master and after.epoch > before.epoch
    assert f"new master {after.master} (epoch {after.epoch})" in progress.text
    groups = stable_rows(driver, "broker-groups", lambda r: r and r[0][1] == after.master)
    assert groups[0][2] == str(after.epoch)
    nodes = stable_rows(driver, "nodes", lambda r: len(r) == 3)
    assert [row[0] for row in nodes if row[2] == "MASTER"] == [after.master]
    assert driver.execute_script("return window.__sameDocument === true;")
    screenshot(driver, "cluster")

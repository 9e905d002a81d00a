"""The Lance tab of the Spark UI (issue 44), in a real browser: headless Chromium
(tests/browser.py) loads each page of a live PySpark session's UI, and of a Spark history
server started here over the session's real event log, with no console error; the figures a
page shows are compared with the system tables and the procedures' own result rows; the
Running page's cancel cancels a held statement.

One local[2] session with its UI on (a random port) and an uncompressed event log; a few small
degraded tables. ``LANCE_TAB_SCREENSHOTS=<folder>`` keeps a screenshot of each page there.
"""
from __future__ import annotations

import json
import os
import threading
import time
from datetime import timezone
import urllib.request
from pathlib import Path

import pytest

from browser import Browser, chromium
from conftest import lance_session, wait_for
from history_server import history_server, lists
from oracle import degraded_table

pytestmark = pytest.mark.skipif(chromium() is None, reason="chromium is not installed (bin/setup installs it)")

TABLES = [f"t{i}" for i in range(5)]
# a catalog storage option that is a secret (Lance ignores it for local files): no page and no
# line of the event log may show it
SECRET = "lance-tab-secret-4f9c2e71"
SHOTS = os.environ.get("LANCE_TAB_SCREENSHOTS")


@pytest.fixture(scope="module")
def events(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("events")


@pytest.fixture(scope="module")
def spark(warehouse, events):
    for t in TABLES:
        ds = degraded_table(str(warehouse / "db" / f"{t}.lance"), fragments=12, rows_per_fragment=40)
        if t == "t1":
            ds.create_scalar_index("id", "BTREE")  # the Table page's indices
    session = lance_session("local[2]", "lance-tab-tests", str(warehouse), {
        "spark.ui.enabled": "true", "spark.ui.port": "0", "spark.ui.showConsoleProgress": "false",
        "spark.eventLog.enabled": "true", "spark.eventLog.dir": str(events),
        "spark.eventLog.compress": "false", "spark.eventLog.rolling.enabled": "false",
        "spark.sql.catalog.lance.storage.aws_secret_access_key": SECRET,
        # Spark's ACLs on, two people told apart by a cookie (a test-only filter, refused unless
        # the JVM was started for tests): "viewer" may look, "operator" may also act; a request
        # without the cookie has no user, which Spark lets do everything (the tests before).
        "spark.acls.enable": "true", "spark.ui.view.acls": "viewer,operator", "spark.modify.acls": "operator",
        "spark.ui.filters": "io.github.lancecompact.spark.ui.TestUserFilter"})
    yield session
    session.stop()


@pytest.fixture(scope="module")
def browser():
    with Browser() as b:
        yield b


@pytest.fixture(scope="module")
def ui(spark) -> str:
    return spark.sparkContext.uiWebUrl


@pytest.fixture(scope="module")
def maintained(spark):
    """The warehouse evaluated, t0 described, maintained, described and evaluated again: what
    an operator's nightly run does. Returns (maintain_warehouse's rows, table_health's rows,
    t0's layouts before and after)."""
    spark.sql("SELECT * FROM lance.system.table_health").collect()
    before = spark.sql("CALL lance.describe_layout(table => 'db.t0')").collect()[0]
    rows = spark.sql("CALL lance.maintain_warehouse()").collect()
    after = spark.sql("CALL lance.describe_layout(table => 'db.t0')").collect()[0]
    health = spark.sql("SELECT * FROM lance.system.table_health").collect()
    return rows, health, (before, after)


@pytest.fixture(scope="module")
def history(spark, maintained):
    """lance.system.maintenance_history after the maintenance, read once."""
    return spark.sql("""SELECT `table`, version, operation, bytes_read, bytes_written, task_seconds, elapsed_ms
        FROM lance.system.maintenance_history""").collect()


def load(browser: Browser, url: str, shot: str | None = None):
    page = browser.load(url)
    assert page.errors == [], f"{url}: console errors {page.errors}"
    if SHOTS and shot:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        browser.screenshot(str(Path(SHOTS) / f"{shot}.png"))
    return page


def number(text: str) -> int | None:
    return int(text) if text.strip().lstrip("-").isdigit() else None


def test_warehouse_page_shows_the_last_health_evaluation(browser, ui, maintained):
    _, health, _ = maintained
    load(browser, f"{ui}/lance/", "warehouse")
    shown = {r["table"].split(" (")[0]: r for r in browser.table("#lance-warehouse")}
    assert set(shown) == {f"db.{t}" for t in TABLES}
    for h in health:
        row = shown[f"{h['namespace']}.{h['table']}"]
        assert number(row["health"]) == h["health_score"]
        for column, field in (("rows", "rows"), ("fragments", "fragments"), ("small fragments", "small_fragments"),
                              ("deleted rows", "deleted_rows"), ("unindexed rows", "unindexed_rows")):
            assert number(row[column]) == h[field], (column, row, h)
        assert row["due"] == ", ".join(h["due"])
    # each table's size, as its health row says (the cell's sort key holds the bytes)
    sizes = browser.evaluate("""Object.fromEntries([...document.querySelectorAll('#lance-warehouse tbody tr')]
        .map(r => [r.dataset.table, r.cells[5].getAttribute('sorttable_customkey')]))""")
    assert {f"{h['namespace']}.{h['table']}": str(h["bytes"]) for h in health} == sizes and all(h["bytes"] > 0 for h in health)
    assert "as of the last evaluation" in browser.evaluate("document.getElementById('lance-evaluated').textContent")
    # a table's name leads to its page (a relative link: the same behind a proxy or in the history server)
    assert browser.evaluate("document.querySelector('#lance-warehouse tr[data-table=\"db.t0\"] a').href") == \
        f"{ui}/lance/table/?name=lance.db.t0"
    # the filter box keeps only matching rows, in the browser
    visible = browser.evaluate("""(() => { const box = document.getElementById('lance-warehouse-filter');
        box.value = 'db.t3'; box.dispatchEvent(new Event('input'));
        return [...document.querySelectorAll('#lance-warehouse tbody tr')].filter(r => r.style.display !== 'none').length; })()""")
    assert visible == 1


def test_history_page_shows_each_statement_with_its_cost(browser, ui, maintained, history):
    rows, _, _ = maintained
    load(browser, f"{ui}/lance/history/", "history")
    shown = browser.table("#lance-history")
    run = browser.evaluate("""(() => { const r = document.querySelector('#lance-history tr.lance-statement[data-id]');
        const rows = [...document.querySelectorAll('#lance-history tr.lance-statement')]
            .filter(x => x.cells[2].textContent.trim() === 'maintain_warehouse');
        const c = rows[0].cells; return {read: c[6].getAttribute('sorttable_customkey'),
            outcome: c[5].textContent.trim(), id: rows[0].dataset.id}; })()""")
    assert run["outcome"] == "succeeded"
    # a warehouse run's bytes_rewritten are what its compactions read (and rewrote)
    assert int(run["read"]) == sum(r["bytes_rewritten"] or 0 for r in rows) > 0
    per_table = [r for r in shown if r["table"] in {f"db.{t}" for t in TABLES} and r["procedure"].startswith("↳")]
    assert {r["table"] for r in per_table} == {r["table"] for r in rows}
    for r in per_table:
        steps = [x for x in rows if x["table"] == r["table"]]
        assert r["outcome"] == ("maintained" if any(x["ran"] for x in steps) else "skipped")
    # the same compactions as the tables' own history: each table maintained at the version of its Rewrite
    rewrites = [h for h in history if h["operation"] == "Rewrite"]
    shown_versions = {r["table"]: r["procedure"].rsplit("(version ", 1)[1].rstrip(")") for r in per_table if r["outcome"] == "maintained"}
    assert {f"db.{h['table']}": str(h["version"]) for h in rewrites} == shown_versions
    # each maintenance version's cost: the same figures as lance.system.maintenance_history,
    # which reads them back from where they are kept with the table
    costs = browser.evaluate("""[...document.querySelectorAll('#lance-history tr.lance-version-cost')].map(r =>
        [r.dataset.table, Number(r.dataset.version), ...[6, 7, 8, 9].map(i => Number(r.cells[i].getAttribute('sorttable_customkey')))])""")
    kept = [h for h in history if h["elapsed_ms"] is not None]
    def key(x):
        return -1 if x is None else x
    assert sorted(tuple(c[:4]) + (c[5],) for c in costs) == sorted(
        (f"db.{k['table']}", k["version"], key(k["bytes_read"]), key(k["bytes_written"]), k["elapsed_ms"]) for k in kept)
    assert {(f"db.{k['table']}", k["version"]) for k in kept} >= {(t, int(v)) for t, v in shown_versions.items()}
    assert all(k["bytes_read"] > 0 and k["bytes_written"] > 0 and k["task_seconds"] is not None
               for k in kept if (f"db.{k['table']}", k["version"]) in {(t, int(v)) for t, v in shown_versions.items()})
    for c in costs:  # task-seconds: the page shows the table's task_ms in seconds
        k = next(k for k in kept if f"db.{k['table']}" == c[0] and k["version"] == c[1])
        assert c[4] == (-1 if k["task_seconds"] is None else round(k["task_seconds"] * 1000))
    # other versions (a compaction's reservation of fragment ids, writes): no cost (NULL)
    others = [h for h in history if h["operation"] not in ("Rewrite", "CreateIndex")]
    assert others and all(h["elapsed_ms"] is None and h["bytes_read"] is None for h in others)


def test_table_page_shows_health_indices_and_layouts(browser, ui, maintained, history):
    _, health, (before, after) = maintained
    load(browser, f"{ui}/lance/table/?name=lance.db.t0", "table")
    assert browser.evaluate("document.getElementById('lance-table-name').textContent").startswith("db.t0")
    pairs = browser.evaluate("""Object.fromEntries([...document.querySelectorAll('#lance-table-facts tr')]
        .map(r => [r.cells[0].textContent.trim(), r.cells[1].textContent.trim()]))""")
    h = next(x for x in health if x["table"] == "t0")
    assert number(pairs["health score"]) == h["health_score"] and number(pairs["fragments"]) == h["fragments"]
    captions = browser.evaluate("[...document.querySelectorAll('figure.lance-layout figcaption')].map(c => c.textContent)")
    # describe_layout's before and after, and between them the compaction's own (no call needed)
    assert [c.split(":")[0] for c in captions] == [
        f"version {before['version']}", f"version {before['version']} (before compaction)",
        f"version {after['version']} (after compaction)", f"version {after['version']}"]
    assert f"{before['fragments']} fragments" in captions[0] and f"{after['fragments']} fragments" in captions[3]
    assert captions[1].split(":")[1].split("(")[0] == captions[0].split(":")[1].split("(")[0]
    assert captions[2].split(":")[1].split("(")[0] == captions[3].split(":")[1].split("(")[0]
    bars = browser.evaluate("[...document.querySelectorAll('figure.lance-layout')].map(f => f.querySelectorAll('rect').length)")
    assert all(n >= 1 for n in bars)
    # an indexed table's indices as its health row lists them
    load(browser, f"{ui}/lance/table/?name=lance.db.t1")
    h1 = next(x for x in health if x["table"] == "t1")
    shown = browser.table("#lance-table-indices")
    assert [(r["name"], r["type"], number(r["segments"]), number(r["unindexed rows"])) for r in shown] == \
        [(i["name"], i["type"], i["segments"], i["unindexed_rows"]) for i in h1["indices"]] != []
    # each index's age: when its newest segment was built, as the health row says
    assert [r["built"].split("(")[1].rstrip(")") for r in shown] == \
        [i["built_at"].astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC") for i in h1["indices"]]
    # a maintained table never described: its layout before and after the compaction all the same
    load(browser, f"{ui}/lance/table/?name=lance.db.t2")
    captions = browser.evaluate("[...document.querySelectorAll('figure.lance-layout figcaption')].map(c => c.textContent)")
    version = max(h["version"] for h in history if h["table"] == "t2" and h["operation"] == "Rewrite")
    h2 = next(x for x in health if x["table"] == "t2")
    assert [c.split(":")[0] for c in captions] == [f"version {version - 2} (before compaction)", f"version {version} (after compaction)"]
    assert captions[0].startswith(f"version {version - 2} (before compaction): 12 fragments, ")
    assert f": {h2['fragments']} fragments, {h2['rows']} rows" in captions[1]


def test_running_page_cancel_cancels_the_statement(browser, ui, spark, warehouse):
    degraded_table(str(warehouse / "db" / "held.lance"), fragments=12, rows_per_fragment=40, delete_every=0)
    outcome = {}

    def run():
        try:
            # two tasks (6 fragments each): the first finishes, the second is held
            spark.sql("CALL lance.compact(table => 'db.held', options => map('target_rows_per_fragment', '240', "
                      "'test_task_sleep_ms', '1:60000'))").collect()
            outcome["ok"] = True
        except Exception as e:
            outcome["error"] = str(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def running():
        load(browser, f"{ui}/lance/running/")
        return [r for r in (browser.table("#lance-running") or []) if r["table"] == "db.held"]
    held = wait_for(running, timeout=60, step=0.5)[0]
    assert held["procedure"] == "compact"
    # before its first task ends the page says why it shows no bytes yet
    assert held["bytes"].startswith(("none yet (said as each rewrite task ends", "read ")), held
    # its bytes so far: the finished task's, while the other is held
    held = wait_for(lambda: [r for r in running() if "written" in r["bytes"] and r["tasks"] == "1 of 2"],
                    timeout=60, step=0.5)[0]  # 480 rows at 240 a fragment: two tasks
    assert held["bytes"].startswith("read "), held
    if SHOTS:
        browser.screenshot(str(Path(SHOTS) / "running.png"))
    # a viewer without Spark's modify ACL sees the statement but no cancel, and cannot post one
    browser.evaluate("document.cookie = 'lance_test_user=viewer; path=/'")
    try:
        load(browser, f"{ui}/lance/running/")
        assert [r["table"] for r in browser.table("#lance-running")] == ["db.held"]
        assert browser.evaluate("document.querySelectorAll('#lance-running form, #lance-running button').length") == 0
        status = browser.evaluate(f"""fetch('{ui}/lance/cancel/', {{method: 'POST', redirect: 'manual',
            body: new URLSearchParams({{id: '{held["#"]}'}})}}).then(r => r.status)""")
        assert status == 403
        # nobody logged in (no filter names a user: Spark's own check lets that through), and the
        # operator's login ridden by another site's form: both refused
        assert _post_cancel(ui, held["#"]) == 403
        assert _post_cancel(ui, held["#"], user="operator", origin="http://evil.example") == 403
        assert _post_cancel(ui, held["#"], user="operator", origin="null") == 403
        time.sleep(1)
        assert thread.is_alive() and [r["table"] for r in running()] == ["db.held"]
    finally:
        browser.evaluate("document.cookie = 'lance_test_user=operator; path=/'")
    # the operator, who holds it, gets the button
    load(browser, f"{ui}/lance/running/")
    assert browser.evaluate("document.querySelectorAll('#lance-running form').length") == 1
    started = time.monotonic()
    # the page's own form, as its button posts it (the confirm dialog aside)
    after = browser.submit("#lance-running form")
    assert after.errors == []
    thread.join(60)
    assert not thread.is_alive() and "error" in outcome and "cancel" in outcome["error"].lower(), outcome
    assert time.monotonic() - started < 60
    load(browser, f"{ui}/lance/history/")
    ended = [r for r in browser.table("#lance-history") if r["table"] == "db.held" and r["procedure"] == "compact"]
    assert ended and ended[0]["outcome"] == "cancelled"
    browser.evaluate("document.cookie = 'lance_test_user=; path=/; max-age=0'")


def _post_cancel(ui: str, statement: str, user: str | None = None, origin: str | None = None) -> int:
    """The HTTP status of a cancel POSTed from outside the page (not a browser's own form)."""
    import urllib.error
    import urllib.request

    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    if user:
        headers["Cookie"] = f"lance_test_user={user}"
    if origin:
        headers["Origin"] = origin
    request = urllib.request.Request(f"{ui}/lance/cancel/", data=f"id={statement}".encode(), headers=headers,
                                     method="POST")

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None
    try:
        with urllib.request.build_opener(NoRedirect).open(request, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_history_server_shows_the_same_pages(browser, ui, spark, maintained, events, tmp_path):
    """A history server started here, the product's jar on its class path, over this session's
    event log (in progress: the history server reads it as it grows)."""
    live = {}
    for path, table in (("", "#lance-warehouse"), ("history/", "#lance-history")):
        load(browser, f"{ui}/lance/{path}")
        live[path] = browser.table(table)
    with history_server(events, tmp_path) as base:
        app = spark.sparkContext.applicationId
        wait_for(lambda: lists(base, app), timeout=120, step=1)
        for path, table, shot in (("", "#lance-warehouse", "history-server-warehouse"),
                                  ("history/", "#lance-history", "history-server-history")):
            load(browser, f"{base}/history/{app}/lance/{path}", shot)
            shown = browser.table(table)
            # the live rows, as of when the log was read (the live page shows elapsed times that
            # go on counting only for running statements: none here)
            assert shown == live[path], path
        load(browser, f"{base}/history/{app}/lance/running/")
        said = browser.evaluate("document.body.innerText")
        assert "A finished application has nothing running" in said and \
            "every statement of this application ended before its event log did" in said, said
        load(browser, f"{base}/history/{app}/lance/table/?name=lance.db.t0")
        # describe_layout's two and the compaction's own two
        assert browser.evaluate("document.querySelectorAll('figure.lance-layout').length") == 4
        # no cancel in the history server
        assert browser.evaluate("document.querySelectorAll('form').length") == 0


def test_no_page_and_no_event_shows_a_secret(browser, ui, maintained, events, spark):
    """Every page of the tab (and each table's) and the whole event log, after every test above."""
    urls = [f"{ui}/lance/{p}" for p in ("", "running/", "history/")] + \
           [f"{ui}/lance/table/?name=lance.db.{t}" for t in TABLES]
    for url in urls:
        page = urllib.request.urlopen(url).read().decode()
        assert "lance-" in page and SECRET not in page, url
    log = "".join(p.read_text() for p in Path(events).rglob("*") if p.is_file())
    assert "io.github.lancecompact.spark.ui.LanceStatementEnded" in log and SECRET not in log


def test_a_thousand_tables_render_within_a_second(browser, ui, spark):
    """The Warehouse page over 1,000 tables' rows: one real evaluation's row of every shape the
    page reads, posted as 1,000 tables' evaluation through the product's own event path."""
    row = spark.sql("SELECT * FROM lance.system.table_health WHERE `table` = 't1'").collect()[0].asDict(recursive=True)
    rows = [{**row, "namespace": f"ns{i // 100}", "table": f"table_{i:04d}", "health_score": i % 101} for i in range(1000)]
    jvm = spark._jvm
    event = jvm.io.github.lancecompact.spark.ui.LanceHealthEvaluated("bulk", int(time.time() * 1000), json.dumps(rows, default=str))
    jvm.io.github.lancecompact.spark.ui.LanceUiPublish.post(spark._jsc.sc(), event)
    wait_for(lambda: urllib.request.urlopen(f"{ui}/lance/").read().count(b"table_0999") > 0, timeout=30)
    server = []
    for _ in range(3):
        started = time.monotonic()
        body = urllib.request.urlopen(f"{ui}/lance/").read()
        server.append(time.monotonic() - started)
    page = load(browser, f"{ui}/lance/")
    shown = browser.evaluate("document.querySelectorAll('#lance-warehouse tbody tr').length")
    assert shown >= 1000 and body.count(b'<tr data-table="ns') == 1000
    print(f"Warehouse page at {shown} tables: server {min(server):.3f} s (best of 3), browser load {page.load_seconds:.3f} s")
    # The page is made in well under a second. The browser's share (Spark's own scripts and
    # styles, parsing and laying out 1,000 rows) is printed, not bounded: on this shared 2-core
    # machine it follows the load (1.0 s to 4.4 s seen; benchmarks/lance_tab.py measures it
    # beside Spark's own Environment page).
    assert min(server) < 1.0


def _index_files(uri: str, uuids: set[str]) -> int:
    """Bytes on disk of these index segments' files (_indices/<uuid>/...)."""
    return sum(f.stat().st_size for u in uuids for f in (Path(uri) / "_indices" / u).rglob("*") if f.is_file())


def test_index_builds_keep_their_bytes_and_task_time(browser, ui, spark, warehouse, maintained):
    """CREATE INDEX in the engine worker and on Spark tasks, and optimize_indices, keep what
    they read and wrote and their task time (not only their elapsed time): bytes written are
    exactly the bytes of the index files the commit added, on disk (a segment merged into
    another counts too: at least the committed files)."""
    import lance
    from oracle import batch

    def segments(uri: str) -> set[str]:
        return {str(s.uuid) for s in lance.dataset(uri).describe_indices()[0].segments} \
            if lance.dataset(uri).describe_indices() else set()

    def cost(table: str, version: int):
        return spark.sql(f"""SELECT bytes_read, bytes_written, task_seconds, elapsed_ms FROM lance.system.maintenance_history
            WHERE `table` = '{table}' AND version = {version}""").collect()[0]

    for table, options, where in (("t3", "", "engine"), ("t4", ", options => map('test_task_sleep_ms', 'all:0')", "spark tasks")):
        uri = str(warehouse / "db" / f"{table}.lance")
        r = spark.sql(f"CALL lance.create_index(table => 'db.{table}', column => 'id', index_type => 'BTREE'{options})").collect()[0]
        assert r.built_by == where, r
        c = cost(table, r.new_version)
        assert c.bytes_written == _index_files(uri, segments(uri)) > 0, (table, c)
        assert c.bytes_read > 0 and c.task_seconds > 0 and c.elapsed_ms > 0, (table, c)
    # a table of one fragment below the target is not "small 100%": it has nothing to merge with
    degraded_table(str(warehouse / "db" / "one.lance"), fragments=1, rows_per_fragment=40, delete_every=0)
    one = [h for h in spark.sql("SELECT * FROM lance.system.table_health").collect() if h.table == "one"][0]
    assert one.fragments == 1 and one.small_fragments == 1, one
    load(browser, f"{ui}/lance/")
    parts = browser.evaluate("document.querySelector('#lance-warehouse tr[data-table=\"db.one\"]').cells[2].textContent")
    assert parts.startswith("one fragment") and "small" not in parts, parts
    load(browser, f"{ui}/lance/table/?name=lance.db.one")
    facts = browser.evaluate("""Object.fromEntries([...document.querySelectorAll('#lance-table-facts tr')]
        .map(r => [r.cells[0].textContent.trim(), r.cells[1].textContent.trim()]))""")
    assert facts["small fragments"] == "1 (the only fragment: nothing to merge it with)", facts
    uri = str(warehouse / "db" / "t1.lance")
    lance.write_dataset(batch(100_000, 200), uri, mode="append")
    old = segments(uri)
    r = spark.sql("CALL lance.optimize_indices(table => 'db.t1')").collect()
    version = lance.dataset(uri).version
    c = cost("t1", version)
    new = _index_files(uri, segments(uri) - old)
    assert c.bytes_written >= new > 0 and c.bytes_read > 0 and c.task_seconds > 0, (r, c, new)


def test_a_clustered_compaction_keeps_its_cost_and_posts_its_layouts(browser, ui, spark, warehouse, maintained):
    """A compaction with a sort order keeps its cost as a plain one does (the bytes of its source
    and new fragments' data files, its tasks' time) and posts its layout before and after."""
    import lance

    uri = str(warehouse / "db" / "t2.lance")
    before = lance.dataset(uri)
    source = sum(d.file_size_bytes or 0 for f in before.get_fragments() for d in f.metadata.files)
    r = spark.sql("CALL lance.compact(table => 'db.t2', sort_order => 'category', target_rows_per_fragment => 200)").collect()[0]
    assert r.strategy == "clustering" and r.commits >= 1, r
    after = lance.dataset(uri)
    new = sum(Path(uri, "data", d.path).stat().st_size for f in after.get_fragments() for d in f.metadata.files)
    kept = spark.sql("""SELECT version, operation, bytes_read, bytes_written, task_seconds, elapsed_ms
        FROM lance.system.maintenance_history WHERE `table` = 't2' AND version > %d AND elapsed_ms IS NOT NULL""" % before.version).collect()
    assert [k.operation for k in kept] == ["Rewrite"], kept
    k = kept[0]
    # every fragment was rewritten: read the table's data files, wrote the new ones (on disk)
    assert k.bytes_read == r.bytes_read == source and k.bytes_written == r.bytes_written == new > 0, (k, r, source, new)
    assert k.task_seconds > 0 and 0 < k.elapsed_ms <= r.elapsed_ms, (k, r)
    load(browser, f"{ui}/lance/table/?name=lance.db.t2")
    captions = browser.evaluate("[...document.querySelectorAll('figure.lance-layout figcaption')].map(c => c.textContent)")
    assert f"version {before.version} (before compaction)" in [c.split(":")[0] for c in captions], captions
    assert f"version {k.version} (after compaction)" in [c.split(":")[0] for c in captions], captions

"""The Lance tab's screenshots and its Warehouse page's render time (issue 44).

    .venv/bin/python benchmarks/lance_tab.py --tables 50 --render-tables 1000 --shots docs/lance-tab

A warehouse of ``--tables`` small degraded tables in three namespaces (a third with a BTREE index
and rows appended after it), one PySpark session with the UI and an event log: the warehouse is
evaluated, one table described, ``maintain_warehouse`` run over two thirds of the tables (its
``max_tables``), the table described and the warehouse evaluated again; a compaction is held (the tests' task sleep) for the Running page. Headless
Chromium (tests/browser.py) takes a screenshot of each page, then of the history server's
Warehouse page over the event log. Then the warehouse grows to ``--render-tables`` tables, is
evaluated once more, and the Warehouse page is timed: the server's answer (best and median of
5 fetches) and the browser's load (navigation to the load event). Prints one JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "examples")]
os.environ["LANCE_COMPACT_TEST_HOOKS"] = "1"  # the held compaction of the Running page's picture

import lance  # noqa: E402
import pyarrow as pa  # noqa: E402

from browser import Browser  # noqa: E402
from conftest import lance_session, wait_for  # noqa: E402
from history_server import history_server, lists  # noqa: E402
from oracle import degraded_table  # noqa: E402


def make_tables(wh: Path, n: int, start: int = 0) -> None:
    """``n`` degraded tables: names by namespace, a third indexed then appended to."""
    for i in range(start, start + n):
        ns = ("sales", "events", "features")[i % 3]
        (wh / ns).mkdir(exist_ok=True)
        path = wh / ns / f"table_{i:04d}.lance"
        ds = degraded_table(str(path), fragments=8 + i % 17, rows_per_fragment=40 + 10 * (i % 5))
        if i % 3 == 2:
            ds.create_scalar_index("id", "BTREE")
            lance.write_dataset(pa.table({c: ds.to_table(limit=30).column(c) for c in ds.schema.names}),
                                str(path), mode="append")


def tiny_tables(wh: Path, n: int, start: int) -> None:
    """``n`` one-fragment tables (the render benchmark needs many tables, not degraded ones)."""
    (wh / "bulk").mkdir(exist_ok=True)
    data = pa.table({"id": pa.array(range(100), pa.int64())})
    for i in range(start, start + n):
        lance.write_dataset(data, str(wh / "bulk" / f"t_{i:04d}.lance"))


def shoot(b: Browser, url: str, path: Path) -> float:
    page = b.load(url)
    assert page.errors == [], (url, page.errors)
    b.screenshot(str(path))
    return page.load_seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tables", type=int, default=50)
    ap.add_argument("--render-tables", type=int, default=1000)
    ap.add_argument("--shots", type=Path, default=ROOT / "docs" / "lance-tab")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lance-tab-"))
    wh, events = work / "wh", work / "events"
    wh.mkdir(), events.mkdir()
    args.shots.mkdir(parents=True, exist_ok=True)
    make_tables(wh, args.tables)
    spark = lance_session("local[2]", "nightly-maintenance", str(wh), {
        "spark.ui.enabled": "true", "spark.ui.port": "0", "spark.ui.showConsoleProgress": "false",
        "spark.eventLog.enabled": "true", "spark.eventLog.dir": str(events),
        "spark.eventLog.compress": "false", "spark.eventLog.rolling.enabled": "false"})
    ui = spark.sparkContext.uiWebUrl
    show = "features.table_0002"
    out = {"tables": args.tables}
    spark.sql("SELECT * FROM lance.system.table_health").collect()
    spark.sql(f"CALL lance.describe_layout(table => '{show}')").collect()
    t = time.monotonic()
    # within a budget of tables, as a nightly run is: the rest stay due for the next night
    spark.sql(f"CALL lance.maintain_warehouse(max_tables => {args.tables * 2 // 3}, max_duration => '10 minutes')").collect()
    out["maintain_warehouse_s"] = round(time.monotonic() - t, 1)
    spark.sql(f"CALL lance.describe_layout(table => '{show}')").collect()
    spark.sql("SELECT * FROM lance.system.table_health").collect()
    degraded_table(str(wh / "sales" / "held.lance"), fragments=30, rows_per_fragment=40, delete_every=0)
    held = threading.Thread(target=lambda: _quietly(lambda: spark.sql(
        # two tasks (600 rows a fragment): the first finishes, the second is held, so the page
        # shows the bytes read and written so far
        "CALL lance.compact(table => 'sales.held', options => map('target_rows_per_fragment', '600', "
        "'test_task_sleep_ms', '1:30000'))").collect()),
        daemon=True)
    with Browser(height=1000) as b:
        shoot(b, f"{ui}/lance/", args.shots / "warehouse.png")
        held.start()
        wait_for(lambda: b"sales.held" in urllib.request.urlopen(f"{ui}/lance/running/").read() or not held.is_alive(), timeout=120)
        print("held running:", held.is_alive(), file=sys.stderr)
        # its first task's bytes reported (the engine says them within a second of the task's end)
        wait_for(lambda: b"written " in urllib.request.urlopen(f"{ui}/lance/running/").read() or not held.is_alive(), timeout=60)
        shoot(b, f"{ui}/lance/running/", args.shots / "running.png")
        held.join(120)
        shoot(b, f"{ui}/lance/history/", args.shots / "history.png")
        shoot(b, f"{ui}/lance/table/?name=lance.{show}", args.shots / "table.png")
        app = spark.sparkContext.applicationId

        # the Warehouse page at --render-tables tables, one evaluation of them all
        tiny_tables(wh, args.render_tables - args.tables - 1, 0)
        t = time.monotonic()
        n = len(spark.sql("SELECT * FROM lance.system.table_health").collect())
        out["render_tables"], out["table_health_s"] = n, round(time.monotonic() - t, 1)
        # the evaluation's event reaches the page through Spark's listener bus, asynchronously
        wait_for(lambda: urllib.request.urlopen(f"{ui}/lance/").read().count(b"<tr data-table=") == n, timeout=120)
        server = []
        for _ in range(5):
            t = time.monotonic()
            body = urllib.request.urlopen(f"{ui}/lance/").read()
            server.append(time.monotonic() - t)
        assert body.count(b"<tr data-table=") == n
        loads = [b.load(f"{ui}/lance/") for _ in range(3)]
        assert all(p.errors == [] for p in loads)
        b.load(f"{ui}/lance/")
        timing = b.evaluate("(() => { const t = performance.getEntriesByType('navigation')[0];"
                            " return {response: t.responseEnd - t.requestStart, dom: t.domContentLoadedEventEnd - t.requestStart,"
                            " load: t.loadEventEnd - t.requestStart}; })()")
        # Spark's own Environment page under the same load, for scale
        spark_page = min(b.load(f"{ui}/environment/").load_seconds for _ in range(3))
        out.update(spark_environment_page_load_s=round(spark_page, 3))
        out.update(server_best_s=round(min(server), 3), server_median_s=round(statistics.median(server), 3),
                   browser_load_best_s=round(min(p.load_seconds for p in loads), 3),
                   browser_navigation_ms={k: round(v) for k, v in timing.items()})
        spark.stop()
    print(json.dumps(out), flush=True)  # the figures, before the history server's picture

    # the history server over the finished application's event log, in a browser of its own
    # (nothing of the live UI's pages left in it)
    with history_server(events, work) as base, Browser(height=1000) as b:
        wait_for(lambda: _listed(base, app), timeout=180, step=1)
        shoot(b, f"{base}/history/{app}/lance/history/", args.shots / "history-server.png")
    shutil.rmtree(work, ignore_errors=True)


def _listed(base: str, app: str) -> bool:
    """Whether the history server lists the application yet (an answer that is not JSON yet,
    as it starts: not yet)."""
    try:
        return lists(base, app)
    except ValueError:
        return False


def _quietly(fn) -> None:
    try:
        fn()
    except Exception as e:  # the held compaction's end is not what this measures
        print(f"held compaction: {e}", file=sys.stderr)


if __name__ == "__main__":
    main()

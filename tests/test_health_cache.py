"""A table's health is read again only when the table changed (maintenance/health_cache.py):
a later evaluation of an unchanged table makes one listing of its ``_transactions/`` and gives the
same row a fresh evaluation gives at that moment (the versions' ages and the hours since the
last compaction counted again), without Spark, on real Lance tables."""
from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import lance
import pyarrow as pa
import pytest

from lance_compact.maintenance.health import table_health
from lance_compact.maintenance.health_cache import HEALTH, HealthCache
from lance_compact.maintenance.policy import resolve_policy
from lance_compact.runtime.envelope import Envelope

pytestmark = pytest.mark.usefixtures("no_version_floor")  # older_than of seconds


def _warehouse(tmp_path, n: int = 3) -> list[dict[str, str]]:
    """``n`` small degraded tables; the first with a BTREE index and a compaction behind it."""
    from oracle import degraded_table

    tables = []
    for i in range(n):
        uri = str(tmp_path / "ns" / f"t{i}.lance")
        ds = degraded_table(uri, fragments=8, rows_per_fragment=20, appends=2, seed=i)
        if i == 0:
            ds.create_scalar_index("id", "BTREE")
            ds.optimize.compact_files(target_rows_per_fragment=40)
        tables.append({"namespace": "ns", "table": f"t{i}", "uri": uri})
    return tables


def _fresh(uri: str, now: datetime, history: bool = True, args: dict | None = None):
    ds = lance.dataset(uri)
    return table_health(ds, resolve_policy(args, ds.config(), None, "ns.t"), now, history, {})


def _evaluate(cache: HealthCache, uri: str, now: datetime, history: bool = True, args: dict | None = None):
    return cache.evaluate(uri, {}, lambda: lance.dataset(uri),
                          lambda config: [resolve_policy(args, config, None, "ns.t")], history, now)


def test_an_unchanged_table_is_served_with_the_fresh_row(tmp_path, opens, monkeypatch):
    from lance_compact.maintenance import health_cache
    from lance_compact.runtime import tables as runtime_tables

    listings = []  # the folders the probes listed (the real listing, counted)
    real_list, real_versions = runtime_tables.list_folder, health_cache.listed_versions
    monkeypatch.setattr(runtime_tables, "list_folder", lambda *a: listings.append(a[2]) or real_list(*a))
    monkeypatch.setattr(health_cache, "listed_versions", lambda *a: listings.append("_versions") or real_versions(*a))
    cache = HealthCache()
    tables = _warehouse(tmp_path)
    now = datetime.now(timezone.utc)
    first = [_evaluate(cache, t["uri"], now) for t in tables]
    assert [e.served for e in first] == [False] * 3 and all(e.ds is not None for e in first)
    later = now + timedelta(hours=3)  # the hours since t0's compaction move on
    opens["n"] = 0
    del listings[:]
    again = [_evaluate(cache, t["uri"], later) for t in tables]
    assert [e.served for e in again] == [True] * 3 and opens["n"] == 0  # a listing each, no open
    assert listings == ["_transactions"] * 3, listings  # one request a table: no _versions/ listing
    for t, e in zip(tables, again):
        assert e.healths[0] == _fresh(t["uri"], later)  # every part, the score, due and reasons
    assert again[0].healths[0].parts["last_compacted_version"] is not None
    hours = [e.healths[0].parts["hours_since_compaction"] for e in (first[0], again[0])]
    assert hours[1] - hours[0] == pytest.approx(3.0)

    # a commit to one table, a cleanup of another (its newest version stays): only they are read
    lance.dataset(tables[1]["uri"]).delete("id % 3 = 0")
    lance.dataset(tables[2]["uri"]).cleanup_old_versions(older_than=timedelta(0))
    opens["n"] = 0
    third = [_evaluate(cache, t["uri"], later) for t in tables]
    assert [e.served for e in third] == [True, False, False] and opens["n"] == 2
    for t, e in zip(tables, third):
        assert e.healths[0] == _fresh(t["uri"], later)
    assert third[2].healths[0].parts["versions"] == 1 < first[2].healths[0].parts["versions"]

    # without the last compaction (maintain_warehouse's evaluation): from what table_health read
    opens["n"] = 0
    bare = _evaluate(cache, tables[0]["uri"], later, history=False)
    assert bare.served and opens["n"] == 0 and bare.healths[0] == _fresh(tables[0]["uri"], later, history=False)

    # another policy (the call's arguments) is evaluated once, then served too
    args = {"min_small_fragments": 2, "older_than": "1 second"}
    assert not _evaluate(cache, tables[0]["uri"], later, args=args).served
    served = _evaluate(cache, tables[0]["uri"], later, args=args)
    assert served.served and served.healths[0] == _fresh(tables[0]["uri"], later, args=args)


def test_the_cutoff_moving_past_versions_is_counted_again(tmp_path):
    """Which versions cleanup would remove depends on now: served rows follow it, and a
    cutoff that falls between versions whose commit times were not read reads the table."""
    cache = HealthCache()
    uri = str(tmp_path / "aged.lance")
    for i in range(3):
        lance.write_dataset(pa.table({"x": [i]}), uri, mode="append" if i else "create")
    time.sleep(1.2)
    for i in range(3):
        lance.write_dataset(pa.table({"x": [i]}), uri, mode="append")
    newest = lance.dataset(uri).get_version()["timestamp"].astimezone(timezone.utc)
    args = {"older_than": "1 second", "min_small_fragments": 100}
    seen = []
    for now in (newest - timedelta(seconds=5), newest + timedelta(milliseconds=100),
                newest + timedelta(seconds=30), newest - timedelta(seconds=5)):
        e = _evaluate(cache, uri, now, history=False, args=args)
        assert e.healths[0] == _fresh(uri, now, history=False, args=args), now
        seen.append((e.served, e.healths[0].parts["reclaimable_versions"]))
    # none old; the older half (bisection: times not read before); all but the newest (the
    # newest's own time, known, is older than the cutoff); none again (the oldest's time, known)
    assert seen == [(False, 0), (False, 3), (True, 5), (True, 0)], seen


def test_what_is_kept_of_a_table_does_not_grow_with_its_transaction_names(tmp_path):
    """The probe's mark of a kept table is a digest of its _transactions/ names: the names were
    kept, about 100 bytes a version (a stream committing every few seconds keeps some 100,000
    versions a week: megabytes a table, in every engine worker). A table made again at the
    same location with the same version numbers is still read again."""
    import shutil
    import sys

    from lance_compact.maintenance.version_ages import table_key

    def made(uri):
        ds = lance.write_dataset(pa.table({"id": [0]}), uri)
        for i in range(20):
            ds = lance.write_dataset(pa.table({"id": [i]}), ds, mode="append")

    uri = str(tmp_path / "t.lance")
    made(uri)
    cache, now = HealthCache(), datetime.now(timezone.utc)
    assert not _evaluate(cache, uri, now).served
    mark = cache._marks[table_key(uri, {})]
    kept = sys.getsizeof(mark) + (0 if isinstance(mark, str) else sum(map(sys.getsizeof, mark)))
    assert kept < 200, kept  # 21 names: about 2,100 bytes
    assert _evaluate(cache, uri, now).served
    shutil.rmtree(uri)
    made(uri)
    assert not _evaluate(cache, uri, now).served


def test_a_second_dry_run_reads_only_changed_tables(tmp_path, opens):
    """maintain_warehouse's evaluation and lance.system.table_health go through the worker's
    cache: a second dry run opens only the table that changed, and its rows are the first's
    (and those of an evaluation with nothing kept)."""
    from lance_compact.catalog.system_tables import table_health_rows
    from lance_compact.maintenance.warehouse_maintenance import maintain_warehouse_rows

    tables = _warehouse(tmp_path)
    dry = Envelope.parse("maintain_warehouse", {"tables": tables, "params": {"dry_run": True}})
    health = Envelope.parse("table_health", {"tables": tables})
    HEALTH.forget()
    opens["n"] = 0
    dry_run = lambda: [r[:-1] for r in maintain_warehouse_rows(dry, lambda entries: [])]  # noqa: E731 (not elapsed_ms)
    first = dry_run()
    assert opens["n"] == 3
    opens["n"] = 0
    assert dry_run() == first and opens["n"] == 0
    rows = table_health_rows(health)[1]  # another policy key (history): each table read once
    assert opens["n"] == 3
    opens["n"] = 0
    served = table_health_rows(health)[1]
    assert opens["n"] == 0 and _same(served, rows)
    HEALTH.forget()
    assert _same(table_health_rows(health)[1], rows)  # as with nothing kept
    assert dry_run() == first  # read again (forgotten): kept for the next one

    lance.dataset(tables[1]["uri"]).delete("id % 3 = 0")
    opens["n"] = 0
    changed = dry_run()
    assert opens["n"] == 1  # the changed table only
    HEALTH.forget()
    assert dry_run() == changed  # as with nothing kept
    assert changed != first


def _same(rows: list[tuple], other: list[tuple]) -> bool:
    """The same rows, the hours since the last compaction within a second (their ``now``s
    differ by the time between the queries)."""
    from lance_compact.options import result_columns

    names = [c for c, _ in result_columns("health_columns")]
    i = names.index("hours_since_compaction")
    assert [r[:i] + r[i + 1:] for r in rows] == [r[:i] + r[i + 1:] for r in other]
    return all(abs((a[i] or 0) - (b[i] or 0)) < 1 / 3600 for a, b in zip(rows, other))


def test_the_last_compaction_from_manifest_heads_and_its_bound(tmp_path, monkeypatch):
    """Each version's operation is read from its manifest file's head (the transaction Lance
    inlines, after the index section of a table with indices), as read_transaction names it --
    a pylance compaction that remapped an index included, which read_transaction cannot
    decode -- and a last compaction beyond the look-back is said to be unknown, not none."""
    from oracle import degraded_table
    from lance.file import LanceFileSession
    from lance_compact.compaction import history
    from lance_compact.compaction.transactions import manifest_kind, manifest_names
    from lance_compact.maintenance import health
    from lance_compact.maintenance.version_ages import listed_versions

    uri = str(tmp_path / "t.lance")
    ds = degraded_table(uri, fragments=6, rows_per_fragment=20, appends=2)
    ds.create_scalar_index("id", "BTREE")
    ds.optimize.compact_files(target_rows_per_fragment=60)  # by pylance, not by us
    ds = lance.dataset(uri)
    ds.delete("id = 1")
    ds = lance.dataset(uri)
    session = LanceFileSession(uri)
    for v in range(1, ds.version + 1):
        try:
            want = type(ds.read_transaction(v).operation).__name__
        except TypeError as e:  # pylance 14.0.2's gap: a Rewrite that remapped an index
            assert history.undecodable_rewrite(e)
            want = "Rewrite"
        assert manifest_kind(session, manifest_names(v)[0]) == want, v
    compacted = ds.version - 1
    listed = listed_versions(uri, {})
    assert history.newest_rewrite(ds, listed, 100) == (compacted, True)
    assert history.newest_rewrite(ds) == (compacted, True)
    assert history.newest_rewrite(ds, listed, 1) == (None, False)

    now = datetime.now(timezone.utc)
    policy = resolve_policy(None, ds.config(), None, "ns.t")
    found = table_health(ds, policy, now, True, {})
    assert found.parts["last_compacted_version"] == compacted and "last_compaction" not in found.reasons
    monkeypatch.setattr(health, "LOOK_BACK", 1)
    bounded = table_health(ds, policy, now, True, {})
    assert bounded.parts["last_compacted_version"] is None and bounded.parts["hours_since_compaction"] is None
    assert bounded.reasons["last_compaction"].startswith("not known: no compaction among the newest 1 versions")


def test_a_read_that_keeps_nothing_never_leaves_newer_marks_beside_an_older_state(tmp_path):
    """A read that keeps nothing (the table it opened is not at the listed version: a commit
    between the listing and the open, or a caller's handle of an earlier version) leaves the
    earlier kept state: the probe's marks, of the table as it is now, must not be kept beside
    it, or the next one-listing probe finds them unchanged and serves the table as it was
    before (a maintained table still due: found by test_maintain_warehouse)."""
    from oracle import degraded_table

    uri = str(tmp_path / "ns" / "t.lance")
    degraded_table(uri, fragments=8, rows_per_fragment=20, appends=2)
    cache = HealthCache()
    now = datetime.now(timezone.utc)
    assert not _evaluate(cache, uri, now).served  # kept
    earlier = lance.dataset(uri).version
    lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=1000)  # changes the table
    raced = cache.evaluate(uri, {}, lambda: lance.dataset(uri, version=earlier),
                           lambda config: [resolve_policy(None, config, None, "ns.t")], True, now)
    assert not raced.served
    again = _evaluate(cache, uri, now)
    fresh = _fresh(uri, now)
    assert [(h.score, h.parts.get("fragments"), h.due) for h in again.healths] == \
        [(fresh.score, fresh.parts.get("fragments"), fresh.due)], (again, fresh)

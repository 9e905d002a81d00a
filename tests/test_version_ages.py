"""Versions from one listing of ``_versions/`` (maintenance/version_ages.py): the same numbers and
the same reclaimable versions as ``versions()`` gives, with far fewer manifests read -- on fresh,
cleaned-up and detached-version tables, both manifest naming schemes, locally and on S3."""
from __future__ import annotations

import math
import time
from datetime import datetime, timedelta, timezone

import lance
import pyarrow as pa
import pytest

from lance_compact.compaction import rules
from lance_compact.maintenance.health import table_health
from lance_compact.maintenance.policy import resolve_policy

pytestmark = pytest.mark.usefixtures("no_version_floor")  # policies with older_than '0 seconds'
from lance_compact.maintenance.version_ages import (listed_versions, reclaimable, version_facts, version_infos,
                                                    version_number)


def _table(uri: str, versions: int, storage: dict | None = None, v2_paths: bool = True,
           pause: float = 0.02) -> lance.LanceDataset:
    for i in range(versions):
        lance.write_dataset(pa.table({"id": [i, i + 1000]}), uri, mode="append" if i else "create",
                            storage_options=storage, enable_v2_manifest_paths=v2_paths)
        time.sleep(pause)  # distinct commit times, so every cutoff between two versions is tested
    return lance.dataset(uri, storage_options=storage)


def _numbers(ds) -> list[int]:
    return sorted(v["version"] for v in ds.versions())


def _cutoffs(ds) -> list:
    """A cutoff before every version, between every two, and after the last."""
    times = sorted(v["timestamp"].astimezone(timezone.utc) for v in ds.versions())
    half = timedelta(microseconds=500)
    return [times[0] - half] + [a + (b - a) / 2 for a, b in zip(times, times[1:])] + [times[-1] + half]


def test_manifest_names():
    assert version_number("_versions/7.manifest") == 7
    assert version_number(f"_versions/{(1 << 64) - 1 - 12:020d}.manifest") == 12  # V2: inverted, 20 digits
    assert version_number("_versions/latest_version_hint.json") is None
    assert version_number("_versions/7.manifest-1b2c.tmp") is None
    assert version_number(f"{(1 << 63) | 5}.manifest") is None  # detached (top bit set)
    assert version_number("0.manifest") is None


@pytest.mark.parametrize("v2_paths", [True, False], ids=["v2-names", "v1-names"])
def test_listing_gives_every_version(tmp_path, v2_paths):
    ds = _table(str(tmp_path / "t.lance"), 6, v2_paths=v2_paths, pause=0)
    assert listed_versions(ds.uri, {}) == _numbers(ds) == list(range(1, 7))


def test_reclaimable_as_versions_says_with_few_reads(tmp_path):
    n = 13
    ds = _table(str(tmp_path / "t.lance"), n)
    listed = listed_versions(ds.uri, {})
    versions = ds.versions()
    for retain in (None, 1, 3, n, n + 5):
        for cutoff in _cutoffs(ds):
            got, reads = reclaimable(ds, listed, cutoff, retain)
            assert got == rules.reclaimable(versions, cutoff, retain), (retain, cutoff)
            assert reads <= 2 + math.ceil(math.log2(n)), reads
    # everything old (older_than '0 seconds'): the open manifest's own time says so, nothing read
    assert reclaimable(ds, listed, datetime.now(timezone.utc), None) == (list(range(1, n)), 0)
    # nothing old (a table written within the last week): one manifest read, the oldest candidate's
    assert reclaimable(ds, listed, datetime.now(timezone.utc) - timedelta(days=7), None) == ([], 1)


def test_cleaned_up_and_detached_versions(tmp_path):
    ds = _table(str(tmp_path / "t.lance"), 8)
    ds.cleanup_old_versions(older_than=timedelta(0), retain_versions=3)
    detached = lance.LanceDataset.commit(ds.uri, lance.LanceOperation.Append(
        lance.fragment.write_fragments(pa.table({"id": [7]}), ds.uri)), read_version=ds.version, detached=True)
    assert detached.version >= 1 << 63
    ds = lance.dataset(ds.uri)
    assert listed_versions(ds.uri, {}) == _numbers(ds) == [6, 7, 8]
    for cutoff in _cutoffs(ds):
        assert reclaimable(ds, [6, 7, 8], cutoff, None)[0] == rules.reclaimable(ds.versions(), cutoff, None)


def test_health_by_listing_equals_health_by_versions(tmp_path):
    ds = _table(str(tmp_path / "t.lance"), 9)
    mid = _cutoffs(ds)[5]  # between versions 5 and 6
    for older_than in ("0 seconds", "7 days", mid.isoformat()):
        for retain in (None, 2):
            policy = resolve_policy({"older_than": older_than, "retain_versions": retain}, ds.config(), {}, "t")
            now = datetime.now(timezone.utc)
            listed = table_health(ds, policy, now=now, history=False, storage_options={})
            read = table_health(ds, policy, now=now, history=False)
            assert (listed.parts["versions"], listed.parts["reclaimable_versions"]) == \
                (read.parts["versions"], read.parts["reclaimable_versions"]), (older_than, retain)
            assert (listed.score, listed.due, dict(listed.reasons)) == (read.score, read.due, dict(read.reasons))


def test_on_s3_one_listing_not_every_manifest(s3):
    log = s3.log
    storage = s3.storage_options
    ds = _table(s3.fresh_bucket("ages") + "/t.lance", 12, storage, pause=0.01)
    versions = ds.versions()

    def requests() -> int:
        return sum(1 for _ in open(log))

    before = requests()
    ds.versions()
    every_manifest = requests() - before
    now = datetime.now(timezone.utc)
    middle = sorted(v["timestamp"].astimezone(timezone.utc) for v in versions)[6] + timedelta(microseconds=1)
    # all old ('0 seconds'): the listing alone; none old (a week): the listing and the oldest
    # candidate's manifest; a cutoff in the middle: a bisection, each step a manifest read
    for cutoff, most in ((now, 1), (now - timedelta(days=7), 3), (middle, 1 + 2 * (2 + math.ceil(math.log2(12))))):
        before = requests()
        count, old = version_facts(ds, storage, cutoff, None)
        spent = requests() - before
        assert (count, old) == (12, rules.reclaimable(versions, cutoff, None)), cutoff
        assert spent <= most, (cutoff, spent, every_manifest)
    assert every_manifest >= 12


def test_a_version_read_once_is_not_read_again(s3):
    """The engine keeps the commit times it read: the next evaluation of the same table (no new
    version, or new ones) reads only the listing, with the same answer as versions() gives."""
    storage = s3.storage_options
    ds = _table(s3.fresh_bucket("again") + "/t.lance", 6, storage, pause=0.01)
    week = datetime.now(timezone.utc) - timedelta(days=7)

    def requests() -> int:
        return sum(1 for _ in open(s3.log))

    before = requests()
    assert version_facts(ds, storage, week, None) == (6, [])
    first = requests() - before
    again = lance.dataset(ds.uri, storage_options=storage)
    before = requests()
    assert version_facts(again, storage, week, None) == (6, [])
    assert (first, requests() - before) == (3, 1)  # listing + the oldest's HEAD and GET; then the listing
    lance.write_dataset(pa.table({"id": [99]}), ds.uri, mode="append", storage_options=storage)
    ds = lance.dataset(ds.uri, storage_options=storage)
    for cutoff in _cutoffs(ds):
        assert version_facts(ds, storage, cutoff, None) == (7, rules.reclaimable(ds.versions(), cutoff, None))


def test_a_table_created_again_forgets_the_old_times(tmp_path):
    """Dropped and created again at the same URI, a table's versions restart from 1: the times of
    the old table's versions are not used for the new one's."""
    import shutil
    uri = str(tmp_path / "t.lance")
    old = _table(uri, 5)
    assert version_facts(old, {}, datetime.now(timezone.utc) - timedelta(days=7), None) == (5, [])
    shutil.rmtree(uri)
    time.sleep(0.05)
    new = _table(uri, 3)
    # before the new table's first commit, after every commit of the old one: nothing of the new
    # table is reclaimable, though the old table's version 1 (remembered, if it were) is older
    before = _cutoffs(new)[0]
    assert version_facts(new, {}, before, None) == (3, rules.reclaimable(new.versions(), before, None)) == (3, [])
    between = _cutoffs(new)[1]  # after the new version 1, before its version 2
    assert version_facts(new, {}, between, None) == (3, rules.reclaimable(new.versions(), between, None)) == (3, [1])


def test_the_commit_times_kept_stay_within_their_bounds():
    """The engine keeps commit times for its lifetime: at most ``tables`` tables and ``versions``
    times in all, the least recently evaluated table forgotten first; one table over the whole
    bound keeps its newest times. Without the count (weeks of a maintenance service over tables
    keeping many versions) the kept times grew with every version of every table."""
    from lance_compact.maintenance.version_ages import CommitTimes

    now = datetime.now(timezone.utc)
    kept = CommitTimes(tables=100, versions=1_000)
    for t in range(50):
        versions = list(range(1, 101))
        kept.remember(f"t{t}", 100, {v: now for v in versions}, versions)
        assert sum(len(e[1]) for e in kept._by_uri.values()) == kept._count <= 1_000
    assert list(kept._by_uri) == [f"t{t}" for t in range(40, 50)]  # the ten most recent
    assert kept.known("t0", 100) == {} and len(kept.known("t49", 100)) == 100
    kept.remember("t49", 200, {v: now for v in range(1, 201)}, list(range(1, 201)))  # re-evaluated: counted once
    assert kept._count == 1_000 and list(kept._by_uri)[0] == "t41"  # t49 counted once; t40 made room
    kept.remember("big", 5_000, {v: now for v in range(1, 5_001)}, list(range(1, 5_001)))
    assert list(kept._by_uri) == ["big"] and sorted(kept.known("big", 5_000))[0] == 4_001
    assert "1000 versions (at most 1000)" in kept.figures()


@pytest.mark.parametrize("v2_paths", [True, False], ids=["v2-names", "v1-names"])
def test_version_infos_are_what_versions_gives(tmp_path, v2_paths):
    """The versions table and the history read each version's manifest through the dataset's
    session, several at once, not with ``versions()``: the same versions, times and summaries,
    on a table cleaned up and with a detached version; a filter reads only what it keeps, and
    every version's number is still known (whether the next version was a compaction)."""
    ds = _table(str(tmp_path / "t.lance"), 9, v2_paths=v2_paths, pause=0.002)
    ds.delete("id = 3")
    ds.cleanup_old_versions(older_than=timedelta(0), retain_versions=6)
    if v2_paths:  # Lance detaches versions only with V2 names
        lance.LanceDataset.commit(ds.uri, lance.LanceOperation.Append(
            lance.fragment.write_fragments(pa.table({"id": [7]}), ds.uri)), read_version=ds.version, detached=True)
    ds = lance.dataset(ds.uri)
    every = sorted(ds.versions(), key=lambda x: x["version"])
    assert [x["version"] for x in every] == [5, 6, 7, 8, 9, 10]
    infos, numbers = version_infos(ds)
    assert infos == every and numbers == {5, 6, 7, 8, 9, 10}
    even, numbers = version_infos(ds, lambda v: v % 2 == 0)
    assert even == [x for x in every if x["version"] % 2 == 0] and numbers == {5, 6, 7, 8, 9, 10}
    # opened at an older version: the newer ones are listed as versions() lists them
    old = lance.dataset(ds.uri, version=7)
    assert version_infos(old)[0] == sorted(old.versions(), key=lambda x: x["version"])


def test_version_infos_on_s3_are_versions_own(s3):
    """On the object store ``versions()`` answers (a GET a manifest; a version read alone costs a
    HEAD and a GET): the same answer and no more requests."""
    log = s3.log
    storage = s3.storage_options
    ds = _table(s3.fresh_bucket("infos") + "/t.lance", 8, storage, pause=0.005)

    def requests() -> int:
        return sum(1 for _ in open(log))

    start = requests()
    every = sorted(ds.versions(), key=lambda x: x["version"])
    by_versions = requests() - start
    start = requests()
    infos, numbers = version_infos(ds)
    assert infos == every and numbers == set(range(1, 9))
    assert requests() - start <= by_versions
    assert version_infos(ds, lambda v: v > 6)[0] == every[6:]


def test_version_infos_keep_their_bounds(tmp_path, monkeypatch):
    """Old manifests are read a few at once, never more bytes of manifest files together than
    MANIFEST_BYTES_AT_ONCE (a compacted table's old versions are far larger than its open one:
    the bound is the files' own sizes), and through a session that caches nothing: the engine's
    shared session keeps what it held (a table of many versions would fill its cache)."""
    from lance_compact.maintenance import version_ages
    from lance_compact.runtime.tables import lance_session

    uri = str(tmp_path / "t.lance")
    for i in range(9):  # versions 1-9 grow by 40 fragments each; the compaction makes them one
        lance.write_dataset(pa.table({"id": list(range(i * 40, i * 40 + 40))}), uri,
                            mode="append" if i else "create", max_rows_per_file=1)
    lance.dataset(uri).optimize.compact_files()
    sizes = version_ages._local_manifests(uri)
    ds = lance.dataset(uri, session=lance_session())
    assert sizes[ds.version] < max(sizes.values())
    largest = max(sizes[v] for v in range(6, 10))
    monkeypatch.setattr(version_ages, "MANIFEST_BYTES_AT_ONCE", 2 * largest)
    at_once, most, lock = [0], [0], __import__("threading").Lock()
    real = lance.dataset

    def watched(*args, **kwargs):  # the real open, the bytes of manifests it reads at once counted
        size = sizes[kwargs["version"]]
        with lock:
            at_once[0] += size
            most[0] = max(most[0], at_once[0])
        try:
            assert kwargs.get("session") is not lance_session()
            return real(*args, **kwargs)
        finally:
            with lock:
                at_once[0] -= size

    monkeypatch.setattr(version_ages.lance, "dataset", watched)
    held = lance_session().size_bytes()
    wanted = range(6, 10)  # the history of a few versions: only theirs are read
    infos, _ = version_infos(ds, lambda v: v in wanted)
    monkeypatch.setattr(version_ages.lance, "dataset", real)
    assert infos == [x for x in sorted(ds.versions(), key=lambda x: x["version"]) if x["version"] in wanted]
    assert largest <= most[0] <= 2 * largest  # several at once, never more bytes than the bound
    assert lance_session().size_bytes() <= held


def test_maintains_cleanup_decides_from_the_listing_not_every_manifest(s3):
    """maintain's cleanup step, when health did not decide it (a compaction of the same call
    committed first), finds the versions older than ``older_than`` as health does: one listing
    and as few manifests as the answer needs, not ``versions()``' every manifest (a table of
    streaming appends keeps hundreds). The same answer both ways."""
    from lance_compact.maintenance.table_maintenance import cleanup_step
    from lance_compact.runtime.envelope import Target

    log = s3.log
    storage = s3.storage_options
    ds = _table(s3.fresh_bucket("maintcleanup") + "/t.lance", 20, storage, pause=0.002)
    target = Target("db.t", ds.uri, storage)

    def manifest_gets(since: int) -> tuple[int, int]:
        lines = open(log).read().splitlines()
        return len(lines), sum(1 for x in lines[since:] if "GET /" in x and ".manifest" in x)

    for older_than, due in (("7 days", False), ("0 seconds", True)):
        start = manifest_gets(0)[0]
        row = cleanup_step(target, {"older_than": older_than, "retain_versions": None}, None, True, ds)
        gets = manifest_gets(start)[1]
        cutoff = datetime.now(timezone.utc) - (timedelta(days=7) if not due else timedelta(0))
        expected = rules.reclaimable(ds.versions(), cutoff, None)
        assert row["reason"] == rules.cleanup_reason(expected, older_than, None) and bool(expected) == due
        assert not row["ran"] and gets <= 2, (older_than, gets)

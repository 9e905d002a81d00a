"""Storage faults, injected for real: Lance tables on moto's S3-compatible server, reached
through a fault-injecting proxy (tests/fault_proxy.py) that refuses (503 SlowDown, 500),
slows, cuts or loses the answers to chosen requests. Under each fault a CALL lance.compact
either lands exactly once or not at all: the table holds exactly its rows, no Rewrite lands
that the CALL did not report, a failure names the object store and the kind of fault, and
cleanup afterwards (the proxy healthy) leaves no orphan and no missing file.

The catalog reaches the store through the proxy with few client retries and a short request
timeout (``client_max_retries``, ``timeout``) so that a fault that outlasts Lance's retries
fails in seconds; the tests check the table directly against moto."""
import re

import lance
import pytest

from conftest import NO_CLEANUP_FLOOR, lance_session
from oracle import content, degraded_table
from fault_proxy import FaultProxy
from table_files import cleanup_everything, orphans_and_missing, rewrites_since, stored

SPARK_MASTER = "local[2]"  # one attempt per task: a fault Lance's retries did not absorb fails it
MANIFEST = r"/_versions/[^?]*\.manifest$"
DATA = r"/data/"
LISTING = r"\?list-type=2&prefix=[^&]*_versions"
DELETES = r"\?delete|/data/|/_deletions/"
TIMEOUT_S = 8
# Client-side retry budget of the catalog's object-store client: 1 retry, short request timeout.
CLIENT = {"client_max_retries": "1", "client_retry_timeout": "15", "timeout": f"{TIMEOUT_S}s"}
OUTCOMES: list[tuple] = []  # (case, faults injected, outcome, message) for the summary


@pytest.fixture(scope="module")
def proxy(s3):
    with FaultProxy(s3.endpoint) as p:
        yield p
    if OUTCOMES:
        print("\nstorage faults: case | faults injected | outcome | message")
        for row in OUTCOMES:
            print(" | ".join(str(x) for x in row))


@pytest.fixture(scope="module")
def wh(s3):
    return s3.fresh_bucket("faults") + "/wh"


@pytest.fixture(scope="module")
def spark(s3, proxy, wh):
    options = {**s3.storage_options, "aws_endpoint": proxy.endpoint, **CLIENT}
    session = lance_session(SPARK_MASTER, "lance-compact-fault-tests", wh, NO_CLEANUP_FLOOR,
                            storage_options=options)
    yield session
    session.stop()


def names_a_storage_fault(message: str, kinds: tuple[str, ...]) -> bool:
    """The error contract: the words "object store" and the kind of fault."""
    text = message.lower()
    return "object store" in text and any(k.lower() in text for k in kinds)


def says_it_landed(message: str, version: int) -> bool:
    """A failed CALL whose compaction landed (as ``version``) says so, and not the opposite."""
    text = message.lower()
    return (re.search(rf"\b{version}\b[^;]* (was|were) committed|landed all the same, as version {version}\b",
                      text) is not None
            and "nothing was committed" not in text)


def compact_under(spark, s3, proxy, wh, case: str, fault: dict | list[dict], args: str = "",
                  fragments: int = 24):
    """A fresh table db.<case>; the fault(s) switched on for one CALL lance.compact, then off.
    Checks everything that must hold whatever happened; returns (row or None, error text or
    None, compactions landed, the Fault)."""
    name = case.replace("-", "_")
    uri = f"{wh}/db/{name}.lance"
    before = degraded_table(uri, fragments=fragments, storage_options=s3.storage_options)
    expected = content(before)
    proxy.forwarded.clear()
    faults = []
    for f in (fault if isinstance(fault, list) else [fault]):  # "after": the index of an earlier one
        faults.append(proxy.inject(**{**f, "after": faults[f["after"]]} if "after" in f else f))
    injected = faults[0]
    row = error = None
    try:
        row = spark.sql(f"CALL lance.compact(table => 'db.{name}', target_rows_per_fragment => 300"
                        + (f", {args}" if args else "") + ")").collect()[0]
    except Exception as e:  # judged below
        error = str(e)
    finally:
        proxy.heal()
    after = lance.dataset(uri, storage_options=s3.storage_options)
    landed = rewrites_since(after, before.version)
    for f in faults:
        assert f.injected >= 1, f"{case}: no {f.mode} fault was injected ({f.matched} requests matched)"
    # No row lost, duplicated or resurrected, whatever happened.
    assert content(after) == expected
    # The answer is truthful: every compaction that landed was reported, none more.
    if row is not None:
        assert row.commits == landed, (row, landed)
        assert row.new_version == (after.version if landed else before.version), row
        outcome = f"landed {landed}x" if landed else "not landed"
    else:
        outcome = f"failed, landed {landed}x" if landed else "failed, not landed"
    # Cleanup through the healthy proxy leaves no orphan and no missing file.
    spark.sql(cleanup_everything(f"db.{name}")).collect()
    orphans, missing = orphans_and_missing(uri, s3.storage_options)
    assert not orphans and not missing, (orphans, missing)
    assert content(lance.dataset(uri, storage_options=s3.storage_options)) == expected
    OUTCOMES.append((case, "+".join(str(f.injected) for f in faults), outcome, _short(error)))
    if error is not None and landed:  # a failure after a commit must not hide it
        assert says_it_landed(error, after.version), error[:2000]
    return row, error, landed, injected


def _short(error: str | None) -> str:
    """The error's first line, its start and its end (what was committed), for the summary."""
    line = (error or "").split("\n")[0]
    return line if len(line) <= 240 else f"{line[:110]} ... {line[-120:]}"


@pytest.mark.parametrize("case,fault", [
    # The first manifest PUT refused: Lance's client retries it and the commit lands.
    ("503-manifest-once", dict(mode="status", status=503, method="PUT", path=MANIFEST, limit=1)),
    ("500-data-read-once", dict(mode="status", status=500, method="GET", path=DATA, limit=1)),
    # Every data read slowed, under the timeout.
    ("slow-data-reads", dict(mode="slow", delay_ms=150, method="GET", path=DATA)),
    # A data file's PUT answer lost once: the client writes it again.
    ("lose-data-write-once", dict(mode="lose", method="PUT", path=DATA, limit=1)),
])
def test_a_fault_the_client_absorbs_lands_once(spark, s3, proxy, wh, case, fault):
    row, error, landed, _ = compact_under(spark, s3, proxy, wh, case, fault)
    assert error is None and landed == 1 and row.commits == 1 and row.tasks >= 1


@pytest.mark.parametrize("case,fault,kinds", [
    ("503-every-manifest-write", dict(mode="status", status=503, method="PUT", path=MANIFEST), ("503",)),
    ("500-every-data-read", dict(mode="status", status=500, method="GET", path=DATA), ("500",)),
    ("503-every-data-write", dict(mode="status", status=503, method="PUT", path=DATA), ("503",)),
    ("cut-every-data-read", dict(mode="cut", method="GET", path=DATA), ("connection",)),
    ("slow-manifest-write-past-timeout",
     dict(mode="slow", delay_ms=(TIMEOUT_S + 4) * 1000, method="PUT", path=MANIFEST, limit=1), ("timed out",)),
])
def test_a_fault_that_persists_lands_nothing_and_says_storage(spark, s3, proxy, wh, case, fault, kinds):
    row, error, landed, _ = compact_under(spark, s3, proxy, wh, case, fault)
    assert landed == 0 and row is None, row
    assert names_a_storage_fault(error, kinds), error[:2000]
    assert "concurrent" not in error.lower(), error[:2000]


def test_partial_progress_keeps_what_landed_before_the_store_failed(spark, s3, proxy, wh):
    """Two batches; every manifest write refused from the third on (the first batch's two
    commits, fragment reservation and rewrite, go through): the first batch stays, the
    error names the store and says what was committed."""
    row, error, landed, _ = compact_under(
        spark, s3, proxy, wh, "503-second-batch-commit",
        dict(mode="status", status=503, method="PUT", path=MANIFEST, nth=3),
        "partial_progress => true, max_commits => 2")
    assert landed == 1 and row is None
    assert names_a_storage_fault(error, ("503",)), error[:2000]  # and says what landed: compact_under


def test_partial_progress_with_every_data_write_refused_reports_failed_tasks(spark, s3, proxy, wh):
    """Every data write refused under partial progress: each task counts as failed, nothing
    lands, and the row says so (the CALL itself succeeds: failed tasks are counted)."""
    row, error, landed, _ = compact_under(
        spark, s3, proxy, wh, "503-every-data-write-partial",
        dict(mode="status", status=503, method="PUT", path=DATA),
        "partial_progress => true, max_commits => 3", fragments=48)
    assert error is None, error[:2000]
    assert row.tasks_failed >= 3 and row.tasks == 0 and row.commits == 0 and landed == 0


@pytest.mark.parametrize("case,fault,args", [
    # The rewrite's manifest PUT reaches the store, its answer does not (nth=2: the first is
    # the fragment-id reservation): Lance writes it again with If-None-Match and gets 412; it
    # must neither commit twice nor report a conflict with itself.
    ("lose-manifest-response-once", dict(mode="lose", method="PUT", path=MANIFEST, nth=2, limit=1), ""),
    ("lose-every-manifest-response", dict(mode="lose", method="PUT", path=MANIFEST), ""),
    ("cut-manifest-response-once", dict(mode="cut", method="PUT", path=MANIFEST, nth=2, limit=1), ""),
    ("lose-every-manifest-response-partial", dict(mode="lose", method="PUT", path=MANIFEST),
     "partial_progress => true, max_commits => 2"),
    # ... and Lance cannot read the version back to recognise it (its HEADs refused): the
    # CALL fails, and must say that the compaction landed all the same.
    pytest.param(
        "lose-manifest-response-and-check", [dict(mode="lose", method="PUT", path=MANIFEST, nth=2, limit=1),
                                             dict(mode="status", status=503, method="HEAD", path=MANIFEST, after=0)],
        ""),
])
def test_a_lost_manifest_write_response_lands_once_and_says_so(spark, s3, proxy, wh, case, fault, args):
    row, error, landed, _ = compact_under(spark, s3, proxy, wh, case, fault, args)
    assert landed == (2 if "partial" in case else 1)
    # The manifest PUT went through and Lance wrote it again: the store refused (412, If-None-Match),
    # then Lance read the version back and recognised its own transaction.
    assert 412 in proxy.statuses("PUT", MANIFEST), proxy.statuses("PUT", MANIFEST)
    # Truthful either way: a success reports the landed commits (checked in compact_under);
    # a failure must say that the compaction was committed.
    if row is None:
        # names the store, and says that it landed (checked in compact_under)
        assert names_a_storage_fault(error, ("connection", "503", "answer to the commit was lost")), error[:2000]
    else:
        assert row.retries == 0 and row.tasks_conflicted == 0, row


def test_refusals_on_version_listing_now_and_then(spark, s3, proxy, wh):
    """A third of the version listings refused (seeded): lands once or not at all; a failure
    names the store."""
    row, error, landed, _ = compact_under(
        spark, s3, proxy, wh, "503-some-listings",
        dict(mode="status", status=503, method="GET", path=LISTING, fraction=0.35, seed=7))
    assert landed <= 1
    if row is None:
        assert names_a_storage_fault(error, ("503",)), error[:2000]
    else:
        assert landed == 1


@pytest.mark.parametrize("case,fault", [
    # Old manifests unreadable: nothing may be removed on a guess.
    ("cleanup-manifest-reads-refused", dict(mode="status", status=503, method="GET", path=r"/_versions/[^?]*\.manifest")),
    # Half the deletions refused (seeded), or their answers lost (Lance deletes in batches:
    # S3's DeleteObjects, POST /bucket?delete; single DELETEs too).
    ("cleanup-some-deletes-refused", dict(mode="status", status=500, method="POST|DELETE", path=DELETES,
                                          fraction=0.5, seed=3)),
    ("cleanup-delete-responses-lost", dict(mode="lose", method="POST|DELETE", path=DELETES)),
])
def test_cleanup_under_faults_never_removes_a_referenced_file(spark, s3, proxy, wh, case, fault):
    """A table with old versions and orphans (a compaction whose commits were all refused,
    then one that landed); cleanup under the fault either finishes or fails naming the store;
    either way every file the latest version references is still there, and a cleanup with
    the store healthy then leaves no orphan."""
    name = case.replace("-", "_")
    uri = f"{wh}/db/{name}.lance"
    before = degraded_table(uri, fragments=24, storage_options=s3.storage_options)
    expected = content(before)
    call = f"CALL lance.compact(table => 'db.{name}', target_rows_per_fragment => 300)"
    refused = proxy.inject("status", status=503, method="PUT", path=MANIFEST)
    with pytest.raises(Exception, match="object store"):
        spark.sql(call).collect()
    proxy.heal()
    assert refused.injected >= 1 and spark.sql(call).collect()[0].commits == 1
    orphans, _ = orphans_and_missing(uri, s3.storage_options)
    assert orphans  # the refused run's files and the old versions' files
    files = len(stored(uri, s3.storage_options))
    injected = proxy.inject(**fault)
    error = row = None
    try:
        row = spark.sql(cleanup_everything(f"db.{name}")).collect()[0]
    except Exception as e:  # judged below
        error = str(e)
    finally:
        proxy.heal()
    # Measured for the summary (Lance's own counts are reported as they are: see the docs).
    removed = files - len(stored(uri, s3.storage_options))
    assert injected.injected >= 1
    _, missing = orphans_and_missing(uri, s3.storage_options)
    assert not missing, missing
    assert content(lance.dataset(uri, storage_options=s3.storage_options)) == expected
    if error is not None:
        assert "object store" in error.lower(), error[:2000]
    spark.sql(cleanup_everything(f"db.{name}")).collect()
    assert orphans_and_missing(uri, s3.storage_options) == (set(), set())
    assert content(lance.dataset(uri, storage_options=s3.storage_options)) == expected
    OUTCOMES.append((case, injected.injected,
                     "cleanup failed" if error else
                     f"cleanup finished: {removed} files removed, row says {row.data_files_removed} data + "
                     f"{row.deletion_files_removed} deletion files", (error or "").split("\n")[0][:160]))

"""A catalog service: the lance catalog over a Lance REST namespace (`impl=rest`, `uri`), as
teams keep Lance tables. pylance's own server (`lance.namespace.RestAdapter`, in this process,
127.0.0.1, port 0) serves a directory namespace; namespace `db` and table `db.t` are made through
the namespace (its location a name no folder convention predicts). Through Spark every way in
works by identifier; a path is accepted only as the location the service gives; the server
down is a named error with nothing committed.

A second service vends storage options (DirectoryNamespace's `vend_input_storage_options`, with
an expiry a few seconds out) for a table on the S3-compatible server: the operator's catalog
holds no storage credential at all, so every read and write uses the vended ones, and a
compaction that outlasts them is seen refreshing them (DescribeTable calls after the first
credential expired, counted by a proxy in front of the server), with no vended credential in
the engine's log, the event log (job descriptions included) or the result rows.

A third service vends what a test tells it to (tests/vending_service.py: a proxy in front of a
RestAdapter that lays chosen options over DescribeTable's storage options), the attack of issue
41: another endpoint (a listener that records whatever reaches it) with `allow_http=true`, in
every spelling Lance reads; every statement is refused naming the service, the table and the
option, and nothing reaches the listener. Only credentials and their expiry, or the operator's
own values, pass.

Hive Metastores (tests/hive_metastore.py, on 127.0.0.1 with embedded Derby): Hive 2.3 from
pyspark's own jars, started with the module; Hive 3.1 (the standalone metastore, from Maven) only
by the test that needs it (`network`). Tables are declared in the metastore by Lance's own Hive
client (lance-namespace-impls), at their default location under the catalog's `root`."""
from __future__ import annotations

import os
import re
import subprocess
import threading
import time
import uuid

import lance
import lance_namespace
import pytest
from lance import namespace as lance_ns

from conftest import NO_CLEANUP_FLOOR, ROOT, STRATEGIES, lance_session
from fault_proxy import FaultProxy
from hive_metastore import HiveMetastore
from lance_compact.api import CATALOG_CLASS
from oracle import batch, content
from s3_server import ACCESS_KEY_ID
from vending_service import Listener, VendingProxy
import writers

VEND_SECONDS = 2
TOKEN = uuid.uuid4().hex[:12].upper()
PLANTED = (f"AKIA{TOKEN}", f"vended-secret-{TOKEN.lower()}-Zq8")
GLUE_KEYS = (f"AKIAGLUE{TOKEN[:8]}", f"glue-secret-{TOKEN.lower()}-Kp4")
# what the vending service hands out as credentials (the S3-compatible server accepts any key)
VENDED = (f"AKIAVEND{TOKEN[:8]}", f"vend-only-secret-{TOKEN.lower()}-Rw7", f"vend-only-token-{TOKEN.lower()}-Yt2")


class Service:
    """A RestAdapter serving a directory namespace, with a proxy in front that records the
    requests it forwards (DescribeTable among them); bounded start and stop."""

    def __init__(self, properties: dict[str, str]) -> None:
        self.adapter = lance_ns.RestAdapter("dir", properties, host="127.0.0.1", port=0)
        self.adapter.start()
        deadline = time.monotonic() + 30
        while not self.adapter.port:
            assert time.monotonic() < deadline, "the REST adapter did not start in 30 s"
            time.sleep(0.05)
        self.proxy = FaultProxy(f"http://127.0.0.1:{self.adapter.port}").start()
        self.uri = self.proxy.endpoint
        self.client = lance_namespace.connect("rest", {"uri": f"http://127.0.0.1:{self.adapter.port}"})

    def describes(self) -> int:
        return len(self.proxy.statuses("POST", r"/v1/table/[^/]+/describe")) + \
            len(self.proxy.statuses("GET", r"/v1/table/[^/]+/describe"))

    def stop(self) -> None:
        self.proxy.stop()
        self.adapter.stop()


class Vending(Service):
    """A directory namespace on the S3-compatible server (reached, like the operator's catalog
    reaches it, through a recording proxy: :attr:`store`, which key id signed each request),
    vending its own storage options (the operator's: the same endpoint, region, keys), whose
    client (the operator's catalog) reaches it through a :class:`VendingProxy` that lays
    :attr:`VendingProxy.vend` over every DescribeTable answer, or puts it in their place."""

    def __init__(self, s3, root: str) -> None:
        self.store = FaultProxy(s3.endpoint).start()
        self.storage = {**s3.storage_options, "aws_endpoint": self.store.endpoint}
        super().__init__({"root": root, **{f"storage.{k}": v for k, v in self.storage.items()},
                          "vend_input_storage_options": "true"})
        self.vending = VendingProxy(f"http://127.0.0.1:{self.adapter.port}").start()
        self.uri = self.vending.endpoint

    def stop(self) -> None:
        self.vending.stop()
        super().stop()
        self.store.stop()


def _shown(catalog: str, what: str, r) -> None:
    """One line of what a CALL did over ``catalog`` (for the run's log: ``pytest -s``)."""
    if what == "maintain_warehouse":
        steps = [f"{x.table} {x.step} ({x.outcome})" for x in r if x.ran]
        print(f"\n{catalog}: maintain_warehouse ran {'; '.join(steps) or 'nothing'}")
    else:
        print(f"\n{catalog}: {what} v{r.read_version} -> v{r.new_version}, {r.fragments_removed} fragments -> "
              f"{r.fragments_added}, {r.rows_rewritten} rows, {r.elapsed_ms} ms")


def _make_table(service: Service, fragments: int, storage_options: dict | None = None) -> str:
    """db.t through the namespace: ``fragments`` appends of 20 rows, some rows deleted."""
    service.client.create_namespace(lance_ns.CreateNamespaceRequest(id=["db"]))
    for i in range(fragments):
        lance.write_dataset(batch(i * 20, 20), namespace_client=service.client, table_id=["db", "t"],
                            mode="create" if i == 0 else "append")
    ds = lance.dataset(namespace_client=service.client, table_id=["db", "t"])
    ds.delete("id % 11 = 0")
    return ds.uri


class Glue:
    """AWS Glue as moto serves it (the tests' S3-compatible server is moto's, which answers
    Glue's API too): database `db`, table `db.t` declared at a location no convention predicts,
    its data written there with Lance."""

    def __init__(self, s3, bucket: str) -> None:
        from lance_namespace_impls.glue import GlueNamespace

        self.storage = s3.storage_options
        self.bucket = bucket
        self.root = f"{bucket}/glue-data"
        self.settings = {"endpoint": s3.endpoint, "region": "us-east-1", "access_key_id": GLUE_KEYS[0],
                         "secret_access_key": GLUE_KEYS[1], "root": self.root}
        self.client = GlueNamespace(**self.settings, **{f"storage.{k}": v for k, v in self.storage.items()})
        self.client.create_namespace(lance_ns.CreateNamespaceRequest(id=["db"]))
        self.location = self.client.declare_table(lance_ns.DeclareTableRequest(
            id=["db", "t"], location=f"{bucket}/glue-data/t-{TOKEN.lower()}")).location
        for i in range(12):
            lance.write_dataset(batch(i * 20, 20), self.location, mode="create" if i == 0 else "append",
                                storage_options=self.storage)

    def dataset(self) -> lance.LanceDataset:
        return lance.dataset(self.location, storage_options=self.storage)


class Hive:
    """A Hive Metastore (``version`` 2 or 3) and what the tests find in it: database `db`, table
    `db.t` declared by Lance's Hive client at its default location (``<root>/db.db/t``) and 12
    fragments written there, `db.outside`, a Lance table the metastore places outside ``root``,
    and `default.d` (2 fragments) in the metastore's `default` database. ``settings`` are the catalog's (lance-spark's keys); Hive 3's name the metastore's
    catalog as ``parent``, so Spark's ``db.t`` is the metastore's ``hive.db.t``."""

    def __init__(self, version: str, workdir) -> None:
        self.server = HiveMetastore(version, workdir / "metastore")
        self.version = version
        self.root = workdir / "root"
        self.elsewhere = workdir / "elsewhere" / "outside.lance"
        self.settings = {"impl": f"hive{version}", "uri": self.server.uri, "root": str(self.root),
                         **({"parent": "hive"} if version == "3" else {})}
        self.location: str | None = None

    def start(self) -> "Hive":
        from lance_namespace_impls.hive2 import Hive2Namespace
        from lance_namespace_impls.hive3 import Hive3Namespace

        self.server.start()
        cls, ns = (Hive2Namespace, []) if self.version == "2" else (Hive3Namespace, ["hive"])
        self.client = cls(uri=self.server.uri, root=str(self.root))
        self.client.create_namespace(lance_ns.CreateNamespaceRequest(id=[*ns, "db"]))
        self.location = self.client.declare_table(lance_ns.DeclareTableRequest(id=[*ns, "db", "t"])).location
        for i in range(12):
            lance.write_dataset(batch(i * 20, 20), self.location, mode="create" if i == 0 else "append")
        self.client.declare_table(lance_ns.DeclareTableRequest(id=[*ns, "db", "outside"], location=str(self.elsewhere)))
        lance.write_dataset(batch(0, 20), str(self.elsewhere))
        lance.write_dataset(batch(20, 20), str(self.elsewhere), mode="append")
        d = self.client.declare_table(lance_ns.DeclareTableRequest(id=[*ns, "default", "d"])).location
        lance.write_dataset(batch(0, 20), d)
        lance.write_dataset(batch(20, 20), d, mode="append")
        return self

    def dataset(self) -> lance.LanceDataset:
        return lance.dataset(self.location)

    def restart(self) -> None:
        """The metastore again, on the same port and Derby database."""
        self.server.stop()
        self.server.start()

    def catalog(self, name: str, **more: str) -> dict[str, str]:
        return {f"spark.sql.catalog.{name}": CATALOG_CLASS,
                **{f"spark.sql.catalog.{name}.{k}": v for k, v in {**self.settings, **more}.items()}}


@pytest.fixture(scope="module")
def metastores(tmp_path_factory):
    """Hive 2's metastore, started; Hive 3's with its port chosen (the catalogs are static
    settings), started by :func:`hive3` only."""
    hive2 = Hive("2", tmp_path_factory.mktemp("hive2"))
    hive3 = Hive("3", tmp_path_factory.mktemp("hive3"))
    try:
        yield hive2.start(), hive3
    finally:
        hive2.server.stop()
        hive3.server.stop()


@pytest.fixture(scope="module")
def hive3(metastores):
    return metastores[1].start()


def _custom_service(tmp_path_factory):
    """The settings of a catalog whose impl is a class path (tests/counting_namespace.py: a
    directory namespace counting DescribeTable calls), and its table db.t (20 fragments)."""
    from types import SimpleNamespace

    root, counts = tmp_path_factory.mktemp("custom_root"), tmp_path_factory.mktemp("custom_counts")
    client = lance_ns.DirectoryNamespace(root=str(root))
    client.create_namespace(lance_ns.CreateNamespaceRequest(id=["db"]))
    for i in range(20):
        lance.write_dataset(batch(i * 20, 20), namespace_client=client, table_id=["db", "t"],
                            mode="create" if i == 0 else "append")
    return SimpleNamespace(client=client, counts=counts, settings={
        "impl": "counting_namespace.CountingNamespace", "root": str(root), "count_dir": str(counts)})


@pytest.fixture(scope="module")
def services(tmp_path_factory, s3):
    root = tmp_path_factory.mktemp("rest_root")
    plain = Service({"root": str(root)})
    bucket = s3.fresh_bucket("vended")
    storage = {**s3.storage_options, "aws_access_key_id": PLANTED[0], "aws_secret_access_key": PLANTED[1]}
    vend = Service({"root": f"{bucket}/root", **{f"storage.{k}": v for k, v in storage.items()},
                    "vend_input_storage_options": "true",
                    "vend_input_storage_options_refresh_interval_millis": str(VEND_SECONDS * 1000)})
    # a service that manages versions (DescribeTable says managed_versioning; commits are
    # published through its CreateTableVersion)
    managed = Service({"root": str(tmp_path_factory.mktemp("managed_root")), "manifest_enabled": "true",
                       "table_version_tracking_enabled": "true"})
    # a service that vends what a test says (nothing at first), its tables on the S3 server
    evil = Vending(s3, f"{bucket}/evil")
    try:
        plain.location = _make_table(plain, 30)
        vend.location = _make_table(vend, 12)
        vend.storage = storage
        plain.glue = Glue(s3, bucket)
        managed.location = _make_table(managed, 16)
        plain.managed = managed
        plain.custom = _custom_service(tmp_path_factory)
        evil.location = _make_table(evil, 6)
        plain.evil = evil
        yield plain, vend
    finally:
        plain.stop()
        vend.stop()
        managed.stop()
        evil.stop()


@pytest.fixture(scope="module")
def spark(warehouse, services, metastores, tmp_path_factory):
    """The operator's catalogs `rest` and `vend` (static settings: no storage credential for
    `vend`, its endpoint, region and allow_http the operator's), `evil` (the vending service:
    the operator's storage options, keys included), `glue` (and `glue_noroot`, refused), and
    over the Hive Metastores `hive2` (also as `hive2_hadoop`, with the address in lance-spark's
    Hadoop key; and two refused settings), `hive3` (`parent=hive`) and `hive3_levels` (no
    parent: Spark names the metastore's catalog, `hive3_levels.hive.db.t`); with the engine's
    log and Spark's event log kept for the secrets check."""
    plain, vend = services
    hive2, hive3 = metastores
    hive_catalogs = {**hive2.catalog("hive2"), **hive3.catalog("hive3"),
                     **{k: v for k, v in hive3.catalog("hive3_levels").items() if not k.endswith(".parent")},
                     **{k.replace(".uri", ".hadoop.hive.metastore.uris"): v
                        for k, v in hive2.catalog("hive2_hadoop").items()},
                     **{k: v for k, v in hive2.catalog("hive2_noroot").items() if not k.endswith(".root")},
                     **hive2.catalog("hive2_sasl", **{"hadoop.hive.metastore.sasl.enabled": "true"})}
    logs = tmp_path_factory.mktemp("logs")
    (logs / "events").mkdir()
    # every rewrite a Spark job: the executors open the tables through the service too
    conf = {"spark.sql.shuffle.partitions": "2", **NO_CLEANUP_FLOOR, "spark.lance.compact.engineRewrite.maxBatchBytes": "0",
            "spark.sql.catalog.rest": CATALOG_CLASS, "spark.sql.catalog.rest.impl": "rest",
            "spark.sql.catalog.rest.uri": plain.uri,
            "spark.sql.catalog.vend": CATALOG_CLASS, "spark.sql.catalog.vend.impl": "rest",
            "spark.sql.catalog.vend.uri": vend.uri,
            "spark.sql.catalog.vend.headers.x-api-key": "operator-api-key-7Hq2",
            # the places are the operator's; the service vends the same ones, and the credentials
            **{f"spark.sql.catalog.vend.storage.{k}": vend.storage[k] for k in ("aws_endpoint", "allow_http", "aws_region")},
            "spark.sql.catalog.evil": CATALOG_CLASS, "spark.sql.catalog.evil.impl": "rest",
            "spark.sql.catalog.evil.uri": plain.evil.uri,
            **{f"spark.sql.catalog.evil.storage.{k}": v for k, v in plain.evil.storage.items()},
            "spark.sql.catalog.managed": CATALOG_CLASS, "spark.sql.catalog.managed.impl": "rest",
            "spark.sql.catalog.managed.uri": plain.managed.uri,
            "spark.sql.catalog.custom": CATALOG_CLASS,
            **{f"spark.sql.catalog.custom.{k}": v for k, v in plain.custom.settings.items()},
            "spark.sql.catalog.glue": CATALOG_CLASS, "spark.sql.catalog.glue.impl": "glue",
            **{f"spark.sql.catalog.glue.{k}": v for k, v in plain.glue.settings.items()},
            **{f"spark.sql.catalog.glue.storage.{k}": v for k, v in plain.glue.storage.items()},
            "spark.sql.catalog.glue_noroot": CATALOG_CLASS, "spark.sql.catalog.glue_noroot.impl": "glue",
            **{f"spark.sql.catalog.glue_noroot.{k}": v for k, v in plain.glue.settings.items() if k != "root"},
            **hive_catalogs,
            "spark.eventLog.enabled": "true", "spark.eventLog.dir": str(logs / "events"),
            "spark.eventLog.compress": "false", "spark.eventLog.rolling.enabled": "false",
            "spark.lance.compact.engine.log": str(logs / "engine.log")}
    session = lance_session("local[2]", "lance-compact-tests", str(warehouse), conf, strategies=STRATEGIES,
                            picture_dir=str(warehouse.parent))
    session.logs = logs
    yield session
    session.stop()


def _version(service: Service) -> int:
    return lance.dataset(namespace_client=service.client, table_id=["db", "t"]).version


def test_every_way_in_by_identifier(spark, services):
    plain, _ = services
    assert "$" in plain.location and not plain.location.endswith(".lance")  # no folder convention
    assert [r[0] for r in spark.sql("SHOW NAMESPACES IN rest").collect()] == ["db"]
    assert [r.tableName for r in spark.sql("SHOW TABLES IN rest.db").collect()] == ["t"]
    before = lance.dataset(namespace_client=plain.client, table_id=["db", "t"])
    want = content(before)
    assert spark.sql("SELECT count(*), sum(id) FROM rest.db.t").collect()[0][:] == \
        (len(want), sum(want["id"].to_pylist()))

    plan = spark.sql("CALL rest.plan_compaction(table => 'db.t', target_rows_per_fragment => 200)").collect()
    assert plan and sum(r.fragments for r in plan) >= 29
    assert _version(plain) == before.version  # planning commits nothing

    r = spark.sql("CALL rest.compact(table => 'db.t', target_rows_per_fragment => 200)").collect()[0]
    _shown("rest", "compact", r)
    after = lance.dataset(namespace_client=plain.client, table_id=["db", "t"])
    assert r.fragments_removed == 30 and after.version == r.new_version and content(after) == want

    # a clustering run (sort_order), read back through Spark in order
    r = spark.sql("CALL rest.compact(table => 'db.t', sort_order => 'category', "
                  "target_rows_per_fragment => 200)").collect()[0]
    _shown("rest", "clustering compact", r)
    clustered = lance.dataset(namespace_client=plain.client, table_id=["db", "t"])
    assert clustered.version == r.new_version and content(clustered) == want
    cats = clustered.to_table(columns=["category"])["category"].to_pylist()
    assert cats == sorted(cats)

    layout = spark.sql("CALL rest.describe_layout(table => 'db.t')").collect()[0]
    assert layout.fragments == len(clustered.get_fragments()) and layout.version == clustered.version
    assert spark.sql("SELECT count(*) FROM rest.db.t.fragments").collect()[0][0] == len(clustered.get_fragments())

    cleaned = spark.sql("CALL rest.cleanup(table => 'db.t', older_than => '0 seconds')").collect()[0]
    assert cleaned.old_versions >= 1
    assert spark.sql("SELECT count(*) FROM rest.db.t.versions").collect()[0][0] == 1

    m = spark.sql("CALL rest.maintain(table => 'db.t')").collect()
    assert m and {row.step for row in m} >= {"compact", "cleanup"}
    health = spark.sql("SELECT namespace, `table`, error, health_score FROM rest.system.table_health").collect()
    assert [tuple(h)[:3] for h in health] == [("db", "t", None)] and 0 <= health[0].health_score <= 100
    for i in range(12):  # a streaming writer's small appends: the table is due again
        lance.write_dataset(batch(50_000 + i * 20, 20), namespace_client=plain.client, table_id=["db", "t"],
                            mode="append")
    want = content(lance.dataset(namespace_client=plain.client, table_id=["db", "t"]))
    w = spark.sql("CALL rest.maintain_warehouse(target_rows_per_fragment => 200)").collect()
    _shown("rest", "maintain_warehouse", w)
    assert w and {x.table for x in w} == {"db.t"} and all(x.error is None for x in w)
    assert any(x.ran and x.step == "compact" for x in w), w
    assert content(lance.dataset(namespace_client=plain.client, table_id=["db", "t"])) == want


def test_a_path_is_only_the_location_the_service_gives(spark, services, tmp_path):
    plain, _ = services
    located = spark.sql(f"CALL rest.describe_layout(table => '{plain.location}')").collect()[0]
    assert located.version == _version(plain)
    outside = tmp_path / "elsewhere.lance"
    lance.write_dataset(batch(0, 20), str(outside))
    for path in (str(outside), plain.location + "/../x", plain.location.replace("file://", "") + "x"):
        with pytest.raises(Exception, match="is not the location catalog rest's service gives|refused|escapes"):
            spark.sql(f"CALL rest.compact(table => '{path}')").collect()
    assert lance.dataset(str(outside)).version == 1


def test_the_operators_service_cannot_be_changed_or_borrowed(spark, services):
    plain, _ = services
    mine = spark.newSession()
    mine.conf.set("spark.sql.catalog.rest.uri", "http://127.0.0.1:9")
    with pytest.raises(Exception, match="spark.sql.catalog.rest.uri is set by the operator"):
        mine.sql("SHOW TABLES IN rest.db").collect()
    own = spark.newSession()
    own.conf.set("spark.sql.catalog.mine", CATALOG_CLASS)
    own.conf.set("spark.sql.catalog.mine.impl", "rest")
    own.conf.set("spark.sql.catalog.mine.uri", plain.uri)
    with pytest.raises(Exception, match="accepted only in a catalog the operator registers"):
        own.sql("SHOW TABLES IN mine.db").collect()
    reserved = spark.newSession()
    reserved.conf.set("spark.sql.catalog.mine2", CATALOG_CLASS)
    reserved.conf.set("spark.sql.catalog.mine2.warehouse", "/tmp")
    reserved.conf.set("spark.sql.catalog.mine2.storage.lance_compact.catalog.impl", "rest")
    with pytest.raises(Exception, match="reserved"):
        reserved.sql("SHOW NAMESPACES IN mine2").collect()


def test_vended_credentials_refreshed_during_a_compaction(spark, services):
    _, vend = services
    before = lance.dataset(namespace_client=vend.client, table_id=["db", "t"])
    want = content(before)
    described = vend.client.describe_table(lance_ns.DescribeTableRequest(id=["db", "t"]))
    assert int(described.storage_options["expires_at_millis"]) <= (time.time() + VEND_SECONDS + 1) * 1000
    samples: list[tuple[float, int]] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            samples.append((time.monotonic(), vend.describes()))
            time.sleep(0.1)

    threading.Thread(target=watch, daemon=True).start()
    started = time.monotonic()
    try:
        # the commit waits 3 s (tests/writers.py slow_commit): the run outlasts the first credential
        r = spark.sql("CALL vend.compact(table => 'db.t', target_rows_per_fragment => 1000, "
                      "options => map('test_before_commit', 'writers.slow_commit'))").collect()[0]
    finally:
        done.set()
    took = time.monotonic() - started
    after = lance.dataset(namespace_client=vend.client, table_id=["db", "t"])
    assert r.fragments_removed == 12 and after.version == r.new_version and content(after) == want
    expired = started + VEND_SECONDS
    assert took > VEND_SECONDS + 0.5, took
    at_expiry = max(c for t, c in samples if t <= expired)
    # DescribeTable again after it expired (the timeline: seconds from the start, calls so far)
    assert samples[-1][1] > at_expiry, (at_expiry, took, sorted({(round(t - started, 1), c) for t, c in samples
                                                                  if c != samples[0][1] or t <= started + 0.2}))
    print(f"\nvend: compact v{r.read_version} -> v{r.new_version} in {took:.1f} s; credentials vended for "
          f"{VEND_SECONDS} s; DescribeTable calls {samples[0][1]} at the start, {at_expiry} when the first expired, "
          f"{samples[-1][1]} at the end")
    assert spark.sql("SELECT count(*) FROM vend.db.t").collect()[0][0] == len(want)
    rows = [str(x) for x in spark.sql("SELECT * FROM vend.system.table_health").collect()] + [str(r)]
    health = spark.sql("SELECT `table`, error FROM vend.system.table_health").collect()
    assert [tuple(h) for h in health] == [("t", None)]

    # no vended credential (nor the operator's header) anywhere a user or an operator reads
    texts = {"rows": "\n".join(rows), "engine log": (spark.logs / "engine.log").read_text()}
    for f in (spark.logs / "events").rglob("*"):
        if f.is_file():
            texts[f"event log {f.name}"] = f.read_text(errors="replace")
    assert any(k.startswith("event log") and "lance_compact compact db.t" in t for k, t in texts.items())
    found = [(name, s) for name, text in texts.items()
             for s in (*PLANTED, "operator-api-key-7Hq2") if s in text]
    assert not found, found


def test_the_service_down_is_named_and_nothing_commits(spark, services):
    _, vend = services
    lance.write_dataset(batch(10_000, 20), namespace_client=vend.client, table_id=["db", "t"], mode="append")
    lance.write_dataset(batch(10_020, 20), namespace_client=vend.client, table_id=["db", "t"], mode="append")
    version = lance.dataset(namespace_client=vend.client, table_id=["db", "t"]).version
    # before a statement: named at once
    fault = vend.proxy.inject("status", status=503, path=r"^/v1/")
    try:
        with pytest.raises(Exception, match=r"catalog service rest at http://127\.0\.0\.1:\d+ did not answer"):
            spark.sql("CALL vend.compact(table => 'db.t', target_rows_per_fragment => 1000)").collect()
        with pytest.raises(Exception, match="did not answer"):
            spark.sql("SELECT count(*) FROM vend.system.table_health").collect()
    finally:
        vend.proxy.heal()
    assert fault.injected >= 1
    assert lance.dataset(namespace_client=vend.client, table_id=["db", "t"]).version == version

    # mid-way: the tasks ran, then the service stops answering before the commit (the vended
    # credentials have expired by then, so the commit needs the service)
    t, outcome = _at_its_commit(spark, "vend", vend.location)
    fault = vend.proxy.inject("status", status=503, path=r"^/v1/")
    try:
        t.join(120)
        assert not t.is_alive()
    finally:
        vend.proxy.heal()
    failure = [o for o in outcome if isinstance(o, BaseException)]
    assert fault.injected >= 1 and failure, "the compaction committed without its catalog service"
    message = str(failure[0])
    assert "did not answer" in message and "catalog service rest" in message, message[-2000:]
    assert lance.dataset(namespace_client=vend.client, table_id=["db", "t"]).version == version


def _at_its_commit(spark, catalog: str, location: str) -> tuple[threading.Thread, list]:
    """``CALL <catalog>.compact(table => 'db.t')`` on a thread of its own, paused before its
    commit (tests/writers.py mark_then_pause): returned once its tasks ran and it waits there,
    with the list that gets its row or its failure."""
    marker = writers.at_commit(location)
    if os.path.exists(marker):
        os.remove(marker)
    outcome: list = []

    def call() -> None:
        try:
            outcome.append(spark.sql(f"CALL {catalog}.compact(table => 'db.t', target_rows_per_fragment => 1000, "
                                     "options => map('test_before_commit', 'writers.mark_then_pause'))").collect()[0])
        except BaseException as e:  # noqa: B036 - the statement's outcome is the test's subject
            outcome.append(e)

    t = threading.Thread(target=call, daemon=True)
    t.start()
    deadline = time.monotonic() + 120
    while not os.path.exists(marker):
        assert t.is_alive() and time.monotonic() < deadline, (outcome, "the run never reached its commit")
        time.sleep(0.05)
    return t, outcome


def _attacks(place: str) -> list[tuple[dict[str, str], str]]:
    """What a service may try to vend to move the operator's requests (``place``: another
    endpoint), each with the option a refusal names first: every spelling Lance or object_store
    reads for the endpoint, and the other settings that decide where and how a request goes."""
    return [
        ({"aws_endpoint": place, "allow_http": "true"}, "aws_endpoint"),
        ({"AWS_ENDPOINT": place, "allow_http": "true"}, "AWS_ENDPOINT"),
        ({"endpoint": place}, "endpoint"),
        ({"aws_endpoint_url": place}, "aws_endpoint_url"),
        ({"endpoint_url": place}, "endpoint_url"),
        ({"Aws_Endpoint_Url": place}, "Aws_Endpoint_Url"),
        ({"aws_endpoint_url_s3": place}, "aws_endpoint_url_s3"),
        ({"s3_endpoint": place}, "s3_endpoint"),  # no key Lance reads: unknown, refused all the same
        ({"aws_region": "eu-west-1"}, "aws_region"),
        ({"aws_virtual_hosted_style_request": "true"}, "aws_virtual_hosted_style_request"),
        ({"proxy_url": place}, "proxy_url"),
        ({"aws_proxy_url": place}, "aws_proxy_url"),
        ({"aws_skip_signature": "true"}, "aws_skip_signature"),
        ({"use_opendal": "true", "endpoint": place}, "endpoint"),
        ({"aws_metadata_endpoint": place}, "aws_metadata_endpoint"),
        ({"aws_container_credentials_full_uri": place}, "aws_container_credentials_full_uri"),
        ({"aws_endpoint_url_sts": place}, "aws_endpoint_url_sts"),
        ({"allow_invalid_certificates": "true"}, "allow_invalid_certificates"),
        ({"aws_access_key_id": VENDED[0], "aws_secret_access_key": VENDED[1], "aws_session_token": VENDED[2],
          "aws_endpoint": place, "allow_http": "true"}, "aws_endpoint"),
    ]


def test_what_a_service_may_vend():
    """The rule alone (runtime/vended.py), on every store: a vended credential or its expiry
    passes in any alias and letter case; any other vended key passes only with the operator's
    value for the same meaning (aliases and boolean spellings compared as object_store reads
    them), else it is refused naming the key and (for a place) its value, never a secret."""
    from lance_compact.errors import CompactionError
    from lance_compact.runtime import vended

    operator = {"aws_endpoint": "http://127.0.0.1:9000", "allow_http": "true", "aws_region": "us-east-1",
                "aws_access_key_id": "AKIAOPERATOR", "aws_secret_access_key": "operator-secret-123456",
                "google_base_url": "https://storage.example", "azure_storage_account_name": "acct"}
    s3, gs, az = "s3://b/wh/t", "gs://b/wh/t", "az://c/wh/t"
    passes = [
        ({"aws_access_key_id": "A", "AWS_SECRET_ACCESS_KEY": "B", "aws_session_token": "C", "Token": "D",
          "access_key_id": "E", "secret_access_key": "F", "session_token": "G", "aws_token": "H",
          "expires_at_millis": "1"}, s3),
        ({"endpoint": "http://127.0.0.1:9000", "AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "region": "us-east-1",
          "ALLOW_HTTP": "1", "aws_allow_http": "yes"}, s3),
        ({"google_storage_token": "t", "google_bearer_token": "t", "bearer_token": "t",
          "base_url": "https://storage.example"}, gs),
        ({"azure_storage_sas_token": "s", "sas_key": "s", "account_key": "k", "access_key": "k",
          "azure_storage_token": "t", "account_name": "acct", "expires_at_millis": "1"}, az),
        ({}, s3), (None, s3),
    ]
    for vend, location in passes:
        assert vended.refused(vend, operator, location) == [], vend
    refused = [
        ({"aws_endpoint": "http://127.0.0.1:1"}, s3, "aws_endpoint"),
        ({"Endpoint": "http://elsewhere"}, s3, "Endpoint"),
        ({"aws_endpoint_url_s3": "http://elsewhere"}, s3, "aws_endpoint_url_s3"),
        ({"aws_region": "eu-west-1"}, s3, "aws_region"),
        ({"aws_default_region": "us-east-1"}, s3, "aws_default_region"),  # not set by the operator
        ({"allow_http": "false"}, s3, "allow_http"),
        ({"x_allow_http": "true", "allow_http": "true"}, {"allow_http": "false"}, "allow_http"),
        ({"aws_virtual_hosted_style_request": "true"}, s3, "aws_virtual_hosted_style_request"),
        ({"proxy_url": "http://p"}, s3, "proxy_url"),
        ({"aws_proxy_url": "http://p"}, s3, "aws_proxy_url"),
        ({"aws_skip_signature": "true"}, s3, "aws_skip_signature"),
        ({"aws_unsigned_payload": "true"}, s3, "aws_unsigned_payload"),
        ({"aws_bucket": "other"}, s3, "aws_bucket"),
        ({"aws_profile": "default"}, s3, "aws_profile"),
        ({"aws_role_arn": "arn:aws:iam::1:role/x"}, s3, "aws_role_arn"),
        ({"aws_web_identity_token_file": "/etc/passwd"}, s3, "aws_web_identity_token_file"),
        ({"aws_container_credentials_full_uri": "http://x"}, s3, "aws_container_credentials_full_uri"),
        ({"use_opendal": "true"}, s3, "use_opendal"),
        ({"client_max_retries": "0"}, s3, "client_max_retries"),
        ({"s3_endpoint": "http://x"}, s3, "s3_endpoint"),
        ({"google_service_account": "/etc/key.json"}, gs, "google_service_account"),
        ({"service_account_key": "{}"}, gs, "service_account_key"),
        ({"google_base_url": "http://elsewhere"}, gs, "google_base_url"),
        ({"azure_storage_account_name": "other"}, az, "azure_storage_account_name"),
        ({"azure_storage_endpoint": "http://elsewhere"}, az, "azure_storage_endpoint"),
        ({"azure_client_secret": "x"}, az, "azure_client_secret"),
        ({"azure_authority_host": "http://x"}, az, "azure_authority_host"),
        ({"azure_msi_endpoint": "http://x"}, az, "azure_msi_endpoint"),
        ({"azure_federated_token_file": "/x"}, az, "azure_federated_token_file"),
        ({"unknown_setting": "1"}, s3, "unknown_setting"),
        ({"endpoint": "http://127.0.0.1:9000"}, "file:///tmp/t", "endpoint"),  # no store: a key means itself
    ]
    for vend, location, key in refused:
        own, where = (location, s3) if isinstance(location, dict) else (operator, location)
        assert [k for k, _, _ in vended.refused(vend, own, where)][:1] == [key], (vend, location)
    with pytest.raises(CompactionError, match=r"^\[LANCE_COMPACT\] catalog service rest at http://h: table db\.t: the "
                       r"storage option 'aws_endpoint' \('http://127\.0\.0\.1:1'\) it vends is refused \(and "
                       r"'proxy_url'\): it differs from the operator's setting\. .* come from the operator's "
                       r"spark\.sql\.catalog\.<catalog>\.storage\.aws_endpoint$") as e:
        vended.check({"aws_endpoint": "http://127.0.0.1:1", "proxy_url": "http://p",
                      "aws_secret_access_key": "vended-secret-abcdef"}, operator, s3, "catalog service rest at http://h",
                     "db.t")
    assert "vended-secret-abcdef" not in str(e.value) and "operator-secret" not in str(e.value)
    with pytest.raises(CompactionError) as e:  # a secret-named key's value is never shown; control characters escaped
        vended.check({"my_secret\nkey": "vended-secret-abcdef"}, operator, s3, "catalog service rest", "db.t")
    assert "vended-secret-abcdef" not in str(e.value) and "my_secret\\x0akey" in str(e.value)


def test_a_service_cannot_send_the_operators_key_elsewhere(spark, services):
    """Issue 41's attack: the service answers DescribeTable with another endpoint (a listener
    that records whatever reaches it) and allow_http=true. SELECT, compact, table_health and
    maintain_warehouse are refused naming the service, the table and the option (the endpoint's
    value, never a secret), and where the endpoint comes from; every other spelling and place
    setting likewise; the listener hears nothing (so no key id), the table keeps its version.
    Credentials with their expiry pass and are used; so do the operator's own values."""
    evil = services[0].evil
    listener = Listener()
    version = _version(evil)
    shown = rf"catalog service rest at {re.escape(evil.uri)}: table db\.t: the storage option"
    try:
        evil.vending.set({"aws_endpoint": listener.endpoint, "allow_http": "true"})
        for statement in ("SELECT count(*) FROM evil.db.t",
                          "CALL evil.compact(table => 'db.t', target_rows_per_fragment => 1000)",
                          "SELECT * FROM evil.system.table_health",
                          "CALL evil.maintain_warehouse(target_rows_per_fragment => 1000)"):
            with pytest.raises(Exception, match=rf"{shown} 'aws_endpoint' \('{re.escape(listener.endpoint)}'\) it vends "
                               r"is refused: it differs from the operator's setting\. .*come from the operator's "
                               r"spark\.sql\.catalog\.<catalog>\.storage\.aws_endpoint"):
                spark.sql(statement).collect()
        for vend, key in _attacks(listener.endpoint):
            evil.vending.set(vend)
            with pytest.raises(Exception, match=f"{shown} '{re.escape(key)}'") as refused:
                spark.sql("SELECT count(*) FROM evil.db.t").collect()
            assert not [s for s in VENDED if s in str(refused.value)], str(refused.value)
        assert listener.heard() == [], listener.heard()
        assert _version(evil) == version

        # what passes: the operator's own values (in other spellings), and credentials with expiry
        rows = lance.dataset(namespace_client=evil.client, table_id=["db", "t"]).count_rows()
        for vend, replace in (({"allow_http": "TRUE"}, False),
                              ({"AWS_REGION": "us-east-1", "endpoint": evil.store.endpoint}, False),
                              ({"aws_access_key_id": VENDED[0], "aws_secret_access_key": VENDED[1],
                                "aws_session_token": VENDED[2],
                                "expires_at_millis": str(int((time.time() + 600) * 1000))}, True)):
            evil.vending.set(vend, replace=replace)
            assert spark.sql("SELECT count(*) FROM evil.db.t").collect()[0][0] == rows
        assert VENDED[0] in evil.store.signers() and ACCESS_KEY_ID in evil.store.signers()
    finally:
        evil.vending.set({})
        listener.stop()
    assert listener.heard() == []
    assert _version(evil) == version
    texts = [(spark.logs / "engine.log").read_text()] + [
        f.read_text(errors="replace") for f in (spark.logs / "events").rglob("*") if f.is_file()]
    assert not [s for s in VENDED for t in texts if s in t]  # the vended credentials: redacted everywhere


def test_lances_own_refresh_passes_the_check(services):
    """Lance refreshes vended credentials itself, from its own threads, by calling the client's
    describe_table: a service that vends clean credentials at first and another endpoint on the
    refresh is refused there too (pylance 14.0.2, the engine's client as every process opens
    tables through it), and nothing reaches the other endpoint."""
    from lance_compact.runtime import catalog_service as cs, failures

    evil = services[0].evil
    listener = Listener()
    options = {cs.IMPL: "rest", cs.PREFIX + "uri": evil.uri, cs.TABLE_ID: '["db", "t"]', **evil.storage}
    service = cs.service_of(options)
    creds = {"aws_access_key_id": VENDED[0], "aws_secret_access_key": VENDED[1], "aws_session_token": VENDED[2]}
    try:
        evil.vending.set({**creds, "expires_at_millis": str(int((time.time() + 1.5) * 1000))})
        ds = lance.dataset(namespace_client=cs.client(service), table_id=["db", "t"],
                           storage_options=cs.lance_options(options))
        rows = ds.count_rows()
        before = evil.vending.describes
        evil.vending.set({**creds, "expires_at_millis": str(int((time.time() + 600) * 1000)),
                          "aws_endpoint": listener.endpoint, "allow_http": "true"})
        time.sleep(2)
        with pytest.raises(Exception, match="the storage option 'aws_endpoint'.* it vends is refused") as refused:
            for _ in range(3):
                assert ds.to_table().num_rows == rows
        assert evil.vending.describes > before  # Lance asked the service again (through the client)
        named = failures.classify(refused.value)  # as the engine names it when Lance raises it mid-statement
        assert named.kind == "config" and named.phrase.startswith(f"catalog service rest at {evil.uri}: table db.t: "
                                                                  "the storage option 'aws_endpoint'"), named
        assert not [s for s in VENDED if s in named.phrase]
    finally:
        evil.vending.set({})
        listener.stop()
    assert listener.heard() == []


def test_lance_spark_sql_without_a_warehouse(services, tmp_path):
    plain, _ = services
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_GATEWAY")}
    p = subprocess.run([str(ROOT / "bin" / "lance-spark-sql"), "--master", "local[1]",
                        "--conf", "spark.sql.catalog.lance.impl=rest",
                        "--conf", f"spark.sql.catalog.lance.uri={plain.uri}",
                        "-e", "SHOW TABLES IN lance.db; SELECT count(*) FROM lance.db.t"],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = lance.dataset(namespace_client=plain.client, table_id=["db", "t"]).count_rows()
    assert "t" in p.stdout.split() and str(rows) in p.stdout.split()


def test_glue(spark, services):
    """The same catalog over AWS Glue (moto's): lance-spark's keys (region, endpoint, the Glue
    client's credentials), the table's data on the S3-compatible server with the operator's
    storage.*."""
    glue = services[0].glue
    before = glue.dataset()
    want = content(before)
    assert [r.tableName for r in spark.sql("SHOW TABLES IN glue.db").collect()] == ["t"]
    assert spark.sql("SELECT count(*) FROM glue.db.t").collect()[0][0] == len(want)
    r = spark.sql("CALL glue.compact(table => 'db.t', target_rows_per_fragment => 100)").collect()[0]
    _shown("glue", "compact", r)
    after = glue.dataset()
    assert r.fragments_removed == 12 and after.version == r.new_version and content(after) == want
    r = spark.sql("CALL glue.compact(table => 'db.t', sort_order => 'category', "
                  "target_rows_per_fragment => 100)").collect()[0]
    _shown("glue", "clustering compact", r)
    clustered = glue.dataset()
    assert clustered.version == r.new_version and content(clustered) == want
    cats = clustered.to_table(columns=["category"])["category"].to_pylist()
    assert cats == sorted(cats)
    health = spark.sql("SELECT namespace, `table`, error FROM glue.system.table_health").collect()
    assert [tuple(h) for h in health] == [("db", "t", None)]
    for i in range(16):  # small appends: due again (16 small fragments at least)
        lance.write_dataset(batch(50_000 + i * 20, 20), glue.location, mode="append", storage_options=glue.storage)
    want = content(glue.dataset())
    w = spark.sql("CALL glue.maintain_warehouse(target_rows_per_fragment => 100)").collect()
    _shown("glue", "maintain_warehouse", w)
    assert w and {x.table for x in w} == {"db.t"} and all(x.error is None for x in w)
    assert any(x.ran and x.step == "compact" for x in w), w
    with pytest.raises(Exception, match="TABLE_OR_VIEW_NOT_FOUND|cannot be found"):
        spark.sql("CALL glue.compact(table => 'db.nope')").collect()
    with pytest.raises(Exception, match="is not the location catalog glue's service gives"):
        spark.sql(f"CALL glue.compact(table => '{glue.location}x')").collect()
    assert content(glue.dataset()) == want
    texts = [(spark.logs / "engine.log").read_text()] + [
        f.read_text(errors="replace") for f in (spark.logs / "events").rglob("*") if f.is_file()]
    assert not [k for k in GLUE_KEYS for t in texts if k in t]


def _glue_spellings(glue, other: str) -> list[tuple[str, str, str]]:
    """Glue tables a writer may place outside the catalog's root (``glue.root``,
    ``s3://<bucket>/glue-data``), in every spelling: (table, location, what the refusal says).
    ``other``: another bucket."""
    bucket, root = glue.bucket[len("s3://"):], glue.root
    outside = "is outside the catalog's root"
    return [
        ("other_bucket", f"{other}/glue-data/t", outside),
        ("upper_scheme", f"S3://{bucket}/glue-data/t", "an upper-case scheme"),
        ("s3a", f"s3a://{bucket}/glue-data/t", outside),
        ("file_url", "file:///tmp/glue-outside/t", outside),
        ("plain_path", "/tmp/glue-outside/t", outside),
        ("escaped_dots", f"{root}/%2e%2e/other/t", "the percent-escape '%2e'"),
        ("escaped_slash", f"{root}%2F..%2Fother", "the percent-escape '%2F'"),
        ("dot_dot", f"{root}/../other/t", "'..' segment"),
        ("trailing_dot", f"{root}/t/.", "a '.' segment"),
        ("string_prefix", f"s3://{bucket}/glue-data-other/t", outside),
        ("doubled_slash", f"s3://{bucket}//glue-data/t", "an empty segment"),
        ("doubled_inside", f"{root}//t", "an empty segment"),
        ("bucket_case", f"s3://{bucket.upper()}/glue-data/t", outside),
        ("query", f"{root}/t?x=1", "a '?'"),
    ]


def test_glue_tables_outside_root_are_refused_in_every_spelling(spark, services, s3):
    """A Glue catalog's tables must lie under its `root` (required): a table Glue places
    elsewhere, in any spelling (another bucket, `S3://`, `s3a://`, `file://`, a plain path,
    percent-escapes, `..`, a trailing `/.`, a string prefix of root, `//`, the bucket in
    another case, `?`), is left out of SHOW TABLES, table_health and maintain_warehouse (with a
    note in the engine's log) and refused by every statement naming it, its version unchanged.
    A Glue catalog without `root` is refused naming the setting; a session cannot move it."""
    glue = services[0].glue
    other = s3.fresh_bucket("glue-other")
    spellings = _glue_spellings(glue, other)
    written = {"other_bucket": f"{other}/glue-data/t", "string_prefix": f"{glue.bucket}/glue-data-other/t"}
    for location in written.values():
        lance.write_dataset(batch(0, 20), location, storage_options=glue.storage)
        lance.write_dataset(batch(20, 20), location, mode="append", storage_options=glue.storage)
    glue.client.create_namespace(lance_ns.CreateNamespaceRequest(id=["spell"]))
    try:
        for name, location, _ in spellings:
            glue.client.declare_table(lance_ns.DeclareTableRequest(id=["spell", name], location=location))
        assert spark.sql("SHOW TABLES IN glue.spell").collect() == []
        log = (spark.logs / "engine.log").read_text()
        assert all(f"leaving table spell.{name} out of listings" in log for name, _, _ in spellings), log[-3000:]
        health = spark.sql("SELECT namespace, `table`, error FROM glue.system.table_health").collect()
        assert [tuple(h) for h in health] == [("db", "t", None)]
        for name, location, says in spellings:
            with pytest.raises(Exception, match=rf"table spell\.{name}: .*{re.escape(says)}"):
                spark.sql(f"SELECT count(*) FROM glue.spell.{name}").collect()
        for name in written:
            with pytest.raises(Exception, match=f"table spell\\.{name}: the location the catalog service gives, .* is "
                               "outside the catalog's root"):
                spark.sql(f"CALL glue.compact(table => 'spell.{name}', target_rows_per_fragment => 1000)").collect()
            with pytest.raises(Exception, match="is not the location catalog glue's service gives"):
                spark.sql(f"CALL glue.compact(table => '{written[name]}')").collect()
        w = spark.sql("CALL glue.maintain_warehouse(target_rows_per_fragment => 100)").collect()
        assert {x.table for x in w} == {"db.t"} and all(x.error is None for x in w), w
        for location in written.values():
            assert lance.dataset(location, storage_options=glue.storage).version == 2
    finally:
        for name, _, _ in spellings:
            try:
                glue.client.deregister_table(lance_ns.DeregisterTableRequest(id=["spell", name]))
            except Exception:
                pass
        glue.client.drop_namespace(lance_ns.DropNamespaceRequest(id=["spell"]))
    with pytest.raises(Exception, match=r"catalog service glue at \S+: impl=glue needs the catalog's root "
                       r"\(spark\.sql\.catalog\.<catalog>\.root"):
        spark.sql("SHOW TABLES IN glue_noroot.db").collect()
    _settings_are_the_operators(spark, "glue", {**glue.settings, "impl": "glue"}, {"root": f"{other}/glue-data"})


def test_a_service_imports_nothing_a_setting_names_but_its_class():
    """The engine imports no class a property names: the dynamic context provider property
    (which Lance would import, unchecked) is refused; the one class it imports is a class-path
    `impl`, which only the operator's catalog can name (the JVM refuses it in a session's own
    catalog: test_a_namespace_class_of_the_operators) and which must be a LanceNamespace
    (test_a_namespace_class_is_checked_where_it_is_loaded). What a service vends is redacted
    once received."""
    from lance_compact.errors import CompactionError
    from lance_compact.runtime import catalog_service, secrets

    assert catalog_service.service_of({"lance_compact.catalog.impl": " my_pkg.ns.Namespace "}).impl == \
        "my_pkg.ns.Namespace"  # as given (a class path keeps its case)
    with pytest.raises(CompactionError, match="names a class to import"):
        catalog_service.service_of({"lance_compact.catalog.impl": "rest", "lance_compact.catalog.uri": "http://x",
                                    "lance_compact.catalog.dynamic_context_provider.impl": "os.System"})
    service = catalog_service.service_of({"lance_compact.catalog.impl": "rest", "lance_compact.catalog.uri": "http://x",
                                          "lance_compact.catalog.headers.x-api-key": "k-123456789",
                                          "lance_compact.catalog.table_id": '["db", "t"]', "aws_region": "r"})
    assert service.table_id == ("db", "t") and dict(service.properties)["header.x-api-key"] == "k-123456789"
    assert catalog_service.lance_options({"lance_compact.catalog.impl": "rest", "aws_region": "r"}) == {"aws_region": "r"}
    secrets.remember_vended({"aws_secret_access_key": "vended-Zz9-abcdef", "expires_at_millis": "1"})
    assert secrets.redact("denied for vended-Zz9-abcdef", None) == f"denied for {secrets.REDACTED}"


def _settings_are_the_operators(spark, catalog: str, settings: dict[str, str], moves: dict[str, str]) -> None:
    """A session's SET of each key of ``moves`` (to its value) is refused naming it, and a catalog
    of a session's own with the service's ``settings`` is refused as naming a service."""
    for key, value in moves.items():
        mine = spark.newSession()
        mine.conf.set(f"spark.sql.catalog.{catalog}.{key}", value)
        with pytest.raises(Exception, match=f"spark.sql.catalog.{catalog}.{key} is set by the operator"):
            mine.sql(f"SHOW TABLES IN {catalog}.db").collect()
    own = spark.newSession()
    own.conf.set("spark.sql.catalog.mine", CATALOG_CLASS)
    for k, v in settings.items():
        own.conf.set(f"spark.sql.catalog.mine.{k}", v)
    with pytest.raises(Exception, match="accepted only in a catalog the operator registers"):
        own.sql("SHOW TABLES IN mine.db").collect()


def _over_a_metastore(spark, hive: Hive, catalog: str) -> None:
    """SHOW, SELECT, compact, a clustering run, table_health and maintain_warehouse through the
    catalog over ``hive``'s metastore, rows exact; the table outside ``root`` refused."""
    before = hive.dataset()
    want = content(before)
    assert hive.location == f"{hive.root}/db.db/t"  # declared under root by Lance's Hive client
    assert [r[0] for r in spark.sql(f"SHOW NAMESPACES IN {catalog}").collect()] == ["db", "default"]
    assert sorted(r.tableName for r in spark.sql(f"SHOW TABLES IN {catalog}.db").collect()) == ["outside", "t"]
    assert spark.sql(f"SELECT count(*), sum(id) FROM {catalog}.db.t").collect()[0][:] == \
        (len(want), sum(want["id"].to_pylist()))

    r = spark.sql(f"CALL {catalog}.compact(table => 'db.t', target_rows_per_fragment => 100)").collect()[0]
    _shown(catalog, "compact", r)
    after = hive.dataset()
    assert r.fragments_removed == 12 and after.version == r.new_version and content(after) == want
    r = spark.sql(f"CALL {catalog}.compact(table => 'db.t', sort_order => 'category', "
                  "target_rows_per_fragment => 100)").collect()[0]
    _shown(catalog, "clustering compact", r)
    clustered = hive.dataset()
    assert clustered.version == r.new_version and content(clustered) == want
    cats = clustered.to_table(columns=["category"])["category"].to_pylist()
    assert cats == sorted(cats)

    # the table the metastore places outside root: listed by name, left out of the catalog-wide
    # views, refused by every procedure; its version unchanged. The `default` database's table in them.
    health = spark.sql(f"SELECT namespace, `table`, error FROM {catalog}.system.table_health "
                       "ORDER BY namespace").collect()
    assert [tuple(h) for h in health] == [("db", "t", None), ("default", "d", None)]
    for i in range(16):  # small appends: due again (16 small fragments at least)
        lance.write_dataset(batch(50_000 + i * 20, 20), hive.location, mode="append")
    want = content(hive.dataset())
    w = spark.sql(f"CALL {catalog}.maintain_warehouse(target_rows_per_fragment => 100)").collect()
    _shown(catalog, "maintain_warehouse", w)
    assert w and {x.table for x in w} == {"db.t", "default.d"} and all(x.error is None for x in w)
    assert any(x.ran and x.step == "compact" and x.table == "db.t" for x in w), w
    with pytest.raises(Exception, match=r"table db\.outside: the location the catalog service gives: .* is outside "
                       f"the warehouse {re.escape(str(hive.root))} of catalog {catalog}"):
        spark.sql(f"CALL {catalog}.compact(table => 'db.outside')").collect()
    assert lance.dataset(str(hive.elsewhere)).version == 2
    with pytest.raises(Exception, match="TABLE_OR_VIEW_NOT_FOUND|cannot be found"):
        spark.sql(f"CALL {catalog}.compact(table => 'db.nope')").collect()
    assert content(hive.dataset()) == want


def test_hive2(spark, metastores):
    """A Hive Metastore 2.3 (`impl=hive2`, `uri=thrift://...`, `root`): every way in by
    identifier; lance-spark's Hadoop key for the address works as `uri`."""
    hive = metastores[0]
    _over_a_metastore(spark, hive, "hive2")
    rows = hive.dataset().count_rows()
    assert spark.sql("SELECT count(*) FROM hive2_hadoop.db.t").collect()[0][0] == rows


def test_hive_settings_are_the_operators(spark, metastores):
    """A session's SET cannot move the metastore (`uri`, lance-spark's Hadoop key, `impl`,
    `root`), nor may a user's own catalog name one; a catalog without `root`, or with a Hadoop
    setting the engine's Thrift client would not apply, is refused before the metastore is asked."""
    _settings_are_the_operators(spark, "hive2", metastores[0].settings, {
        "uri": "thrift://127.0.0.1:9", "hadoop.hive.metastore.uris": "thrift://127.0.0.1:9", "impl": "rest", "root": "/"})
    with pytest.raises(Exception, match=r"impl=hive2 needs spark.sql.catalog.hive2_noroot.root"):
        spark.sql("SHOW TABLES IN hive2_noroot.db").collect()
    with pytest.raises(Exception, match=r"hadoop.hive.metastore.sasl.enabled is not applied by impl=hive2"):
        spark.sql("SHOW TABLES IN hive2_sasl.db").collect()


def test_hive_tables_outside_root_are_refused_in_every_spelling(spark, metastores):
    """Hive's `root` is the boundary (the JVM's, as for every warehouse): a table the metastore
    places outside it, in any spelling the metastore keeps (another folder, `file://`, an
    upper-case scheme, percent-escapes, `..`, a trailing `/.`, a string prefix of root, `//`),
    is left out of table_health and maintain_warehouse and refused by every statement naming it;
    the real table there keeps its version. (The metastore itself refuses a location on a store
    it has no file system for, and keeps `..`, `/.`, `//` and the scheme's case resolved.)"""
    hive = metastores[0]
    root, workdir = str(hive.root), hive.root.parent
    elsewhere = workdir / "spelled" / "t.lance"
    lance.write_dataset(batch(0, 20), str(elsewhere))
    lance.write_dataset(batch(20, 20), str(elsewhere), mode="append")
    spellings = {
        "other_folder": str(elsewhere),
        "file_url": f"file://{elsewhere}",
        "upper_scheme": f"FILE://{elsewhere}",
        "other_store": "s3://another-bucket/db.db/x",
        "escaped_dots": f"file://{root}/%2e%2e/spelled/t.lance",
        "escaped_slash": f"file://{root}%2F..%2Fspelled/t.lance",
        "dot_dot": f"{root}/../spelled/t.lance",
        "trailing_dot": f"file://{workdir}/spelled/t.lance/.",
        "string_prefix": f"{root}-other/t",
        "doubled_slash": f"file://{workdir}//spelled/t.lance",
    }
    client = hive.client
    kept: dict[str, str] = {}
    try:
        for name, location in spellings.items():
            try:
                client.declare_table(lance_ns.DeclareTableRequest(id=["db", f"spell_{name}"], location=location))
            except Exception as e:  # the metastore itself refused to keep it
                kept[name] = f"metastore refused: {type(e).__name__}"
                continue
            kept[name] = client.describe_table(lance_ns.DescribeTableRequest(id=["db", f"spell_{name}"])).location
        print("\nhive2 keeps:", kept)
        stored = [n for n, where in kept.items() if not where.startswith("metastore refused")]
        assert len(stored) == len(spellings) - 1, kept  # all but the store it has no file system for
        listed = {r.tableName for r in spark.sql("SHOW TABLES IN hive2.db").collect()}
        assert listed == {"t", "outside", *(f"spell_{n}" for n in stored)}  # by name, as Hive lists them
        health = spark.sql("SELECT namespace, `table` FROM hive2.system.table_health ORDER BY namespace").collect()
        assert [tuple(h) for h in health] == [("db", "t"), ("default", "d")]
        for name in stored:
            with pytest.raises(Exception, match=rf"table db\.spell_{name}: the location the catalog service gives: .*"
                               rf"(is outside the warehouse {re.escape(root)} of catalog hive2|is refused)"):
                spark.sql(f"SELECT count(*) FROM hive2.db.spell_{name}").collect()
        with pytest.raises(Exception, match="is outside the warehouse"):
            spark.sql("CALL hive2.compact(table => 'db.spell_file_url', target_rows_per_fragment => 1000)").collect()
        w = spark.sql("CALL hive2.maintain_warehouse(target_rows_per_fragment => 1000)").collect()
        assert {x.table for x in w} == {"db.t", "default.d"} and all(x.error is None for x in w), w
        assert lance.dataset(str(elsewhere)).version == 2
    finally:
        for name in spellings:
            try:
                client.deregister_table(lance_ns.DeregisterTableRequest(id=["db", f"spell_{name}"]))
            except ValueError:  # never declared (the metastore refused it)
                pass


def test_the_metastore_down(spark, metastores):
    """The metastore stopped before a statement: named (`catalog service hive2 at thrift://...
    did not answer`), nothing committed. Stopped after a compaction's tasks ran, before its
    commit: the commit needs no metastore (Lance's Hive tables are `managed_by=storage`: the
    metastore keeps only the location, which the run already has), so it lands, rows exact."""
    hive = metastores[0]
    lance.write_dataset(batch(20_000, 20), hive.location, mode="append")
    lance.write_dataset(batch(20_020, 20), hive.location, mode="append")
    version = hive.dataset().version
    want = content(hive.dataset())
    named = rf"catalog service hive2 at thrift://127\.0\.0\.1:{hive.server.port} did not answer"
    hive.server.stop()
    try:
        with pytest.raises(Exception, match=named):
            spark.sql("CALL hive2.compact(table => 'db.t', target_rows_per_fragment => 1000)").collect()
        with pytest.raises(Exception, match=named):
            spark.sql("SELECT count(*) FROM hive2.system.table_health").collect()
        with pytest.raises(Exception, match=named):
            spark.sql("CALL hive2.maintain_warehouse()").collect()
    finally:
        hive.restart()
    assert hive.dataset().version == version

    t, result = _at_its_commit(spark, "hive2", hive.location)
    hive.server.stop()
    try:
        t.join(120)
        assert not t.is_alive()
    finally:
        hive.restart()
    assert result and not isinstance(result[0], BaseException), result
    after = hive.dataset()
    assert result[0].fragments_removed >= 3 and result[0].new_version == after.version > version
    assert content(after) == want
    assert spark.sql("SELECT count(*) FROM hive2.db.t").collect()[0][0] == len(want)


@pytest.mark.network  # the Hive 3 metastore's jars come from Maven the first time
def test_hive3(spark, hive3):
    """A Hive Metastore 3.1 (`impl=hive3`): with `parent=hive` Spark's `db.t` is the metastore's
    `hive.db.t`, and every way in works as over Hive 2; without `parent` Spark names the
    metastore's catalog as a namespace level, as lance-spark does."""
    assert [r[0] for r in spark.sql("SHOW NAMESPACES IN hive3_levels").collect()] == ["hive"]
    assert [r[0] for r in spark.sql("SHOW NAMESPACES IN hive3_levels.hive").collect()] == ["hive.db", "hive.default"]
    assert sorted(r.tableName for r in spark.sql("SHOW TABLES IN hive3_levels.hive.db").collect()) == ["outside", "t"]
    rows = hive3.dataset().count_rows()
    assert spark.sql("SELECT count(*) FROM hive3_levels.hive.db.t").collect()[0][0] == rows
    health = spark.sql("SELECT namespace, `table`, error FROM hive3_levels.system.table_health "
                       "ORDER BY namespace").collect()
    assert [tuple(h) for h in health] == [("hive.db", "t", None), ("hive.default", "d", None)]
    _over_a_metastore(spark, hive3, "hive3")


def test_hive_client_settings_are_checked():
    """The engine's side: only lance-spark's Hive keys, a Thrift address, a positive pool size;
    no class to import; a metastore's 'does not exist' read as Lance Namespace's not found."""
    from lance_compact.errors import CompactionError
    from lance_compact.runtime import catalog_service

    base = {"lance_compact.catalog.impl": "hive2", "lance_compact.catalog.uri": "thrift://127.0.0.1:9",
            "lance_compact.catalog.root": "/tmp/r"}
    for extra, why in (({"lance_compact.catalog.uri": "http://127.0.0.1:9"}, "not a metastore's Thrift address"),
                       ({"lance_compact.catalog.client.pool-size": "many"}, "not a positive whole number"),
                       ({"lance_compact.catalog.impl_class": "os.System"}, "are not accepted"),
                       ({"lance_compact.catalog.dynamic_context_provider.impl": "os.System"}, "names a class")):
        with pytest.raises(CompactionError, match=why):
            catalog_service.client(catalog_service.service_of({**base, **extra}))
    with pytest.raises(CompactionError, match="impl 'hive' is not supported"):
        catalog_service.service_of({**base, "lance_compact.catalog.impl": "hive"})


def test_a_service_that_manages_versions_publishes_every_commit(spark, services):
    """A directory namespace with table version tracking: DescribeTable says managed_versioning,
    and a commit must be published through the service (CreateTableVersion), which lists the
    table's versions from its own records. A clustering compaction, an index build and a plain
    compaction after an append each commit through the service: its list holds every new
    version, the table's latest version is the service's, rows exact."""
    managed = services[0].managed
    table_id = ["db", "t"]
    assert managed.client.describe_table(lance_ns.DescribeTableRequest(id=table_id)).managed_versioning is True

    def listed() -> list[int]:
        return sorted(v.version for v in managed.client.list_table_versions(
            lance_ns.ListTableVersionsRequest(id=table_id)).versions)

    def published() -> list[int]:
        """CreateTableVersion requests the service answered (through the proxy in front of it)."""
        with managed.proxy._lock:
            return [st for m, p, st in managed.proxy.forwarded
                    if m == "POST" and re.search(r"/v1/table/[^/]+/version/create", p)]

    expected = content(lance.dataset(namespace_client=managed.client, table_id=table_id))
    seen, before = listed(), len(published())
    r = spark.sql("CALL managed.compact(table => 'db.t', sort_order => 'category', "
                  "target_rows_per_fragment => 1000)").collect()[0]
    assert r.commits >= 1 and r.new_version > max(seen) and r.new_version in listed(), (r, seen, listed())
    # published through the service (a commit by location would be listed too, from storage)
    assert len(published()) - before == r.commits and set(published()) == {200}, published()
    before = len(published())
    r = spark.sql("CALL managed.create_index(table => 'db.t', column => 'id', index_type => 'BTREE', "
                  "options => map('test_task_sleep_ms', 'all:0'))").collect()[0]
    assert r.built_by == "spark tasks" and r.new_version in listed(), (r, listed())
    assert len(published()) - before == 1, published()
    lance.write_dataset(batch(10_000, 20), namespace_client=managed.client, table_id=table_id, mode="append")
    lance.write_dataset(batch(10_020, 20), namespace_client=managed.client, table_id=table_id, mode="append")
    expected = content(lance.dataset(namespace_client=managed.client, table_id=table_id))
    before = len(published())
    r = spark.sql("CALL managed.compact(table => 'db.t', target_rows_per_fragment => 1000)").collect()[0]
    assert r.commits >= 1 and r.new_version in listed(), (r, listed())
    assert len(published()) - before >= r.commits, published()  # the index's coverage restore commits too
    ds = lance.dataset(namespace_client=managed.client, table_id=table_id)
    assert ds.version == max(listed()) and content(ds) == expected
    assert ds.to_table(filter="id = 10030", columns=["id"])["id"].to_pylist() == [10030]


def test_a_namespace_class_of_the_operators(spark, services):
    """impl as a Python class path (lance-spark takes a class name the same way): every catalog
    setting but the catalog's own is the class's property (``count_dir`` here); the engine and
    the executors' tasks open the table through it (each DescribeTable is written down with its
    process); SHOW TABLES, SELECT and a compaction on Spark tasks work, rows exact. A session
    cannot change any of its settings, and a catalog a session defines may not name a class."""
    custom = services[0].custom
    opened = custom.counts / "describe_table"
    expected = content(lance.dataset(namespace_client=custom.client, table_id=["db", "t"]))
    assert [r.tableName for r in spark.sql("SHOW TABLES IN custom.db").collect()] == ["t"]
    assert spark.sql("SELECT count(*) AS n FROM custom.db.t").collect()[0].n == expected.num_rows
    r = spark.sql("CALL custom.compact(table => 'db.t', target_rows_per_fragment => 1000)").collect()[0]
    ds = lance.dataset(namespace_client=custom.client, table_id=["db", "t"])
    assert r.commits == 1 and r.new_version == ds.version and content(ds) == expected
    assert len(ds.get_fragments()) == 1
    pids = set(opened.read_text().split())
    assert str(os.getpid()) not in pids and len(pids) >= 2, pids  # the engine and the tasks' Python workers
    _settings_are_the_operators(spark, "custom", custom.settings, {"count_dir": "/tmp", "impl": "rest", "root": "/"})
    nothing = spark.newSession()
    nothing.conf.set("spark.sql.catalog.mine2", CATALOG_CLASS)
    nothing.conf.set("spark.sql.catalog.mine2.impl", "os.system")
    with pytest.raises(Exception, match="accepted only in a catalog the operator registers"):
        nothing.sql("SHOW TABLES IN mine2.db").collect()


def test_a_namespace_class_is_checked_where_it_is_loaded():
    """The engine's side of a class-path impl: a class that is not a LanceNamespace, or that
    cannot be imported, is named as such; a text that is no class path is not an impl."""
    from lance_compact.errors import CompactionError
    from lance_compact.runtime import catalog_service as cs

    for impl, message in (("os.system", "os.system is not a LanceNamespace class"),
                          ("no_such_module.Namespace", "the class no_such_module.Namespace cannot be loaded here"),
                          ("rest; import os", "is not supported: expected a Python class path")):
        with pytest.raises(CompactionError, match=re.escape(message)):
            cs.client(cs.service_of({cs.IMPL: impl, cs.PREFIX + "root": "/tmp"}))

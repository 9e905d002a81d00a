"""The operator's catalog is the operator's: a SQL user's `SET spark.sql.catalog.<name>.<key>`
in a fresh session (before anything names the catalog) neither re-points its warehouse nor
sends its credentials to an endpoint the user picks; a catalog the user defines by SET gets no
operator credential (not the catalog's, not the driver's environment's). Tried through PySpark
sessions, the spark-sql CLI and the Thrift server; a TCP listener on 127.0.0.1 plays the
user's endpoint and must receive nothing carrying an operator key id."""
from __future__ import annotations

import os
import socket
import subprocess
import threading
from pathlib import Path

import lance
import pytest

import client_servers as cs
from conftest import CLEANUP_FLOOR_KEY, ROOT, lance_session
from fault_proxy import FaultProxy
from lance_compact.api import CATALOG_CLASS
from oracle import degraded_table
from s3_server import ACCESS_KEY_ID

# The driver's environment holds credentials too (as on a host with an instance profile):
# a user's own catalog must not sign with them either.
ENV_KEY_ID = "AKIAOPERATORENVKEY9Z"
ENV_SECRET = "operator-env-secret-Wq2"
OPERATOR_KEYS = (ACCESS_KEY_ID.encode(), ENV_KEY_ID.encode())


class Listener:
    """A TCP listener on 127.0.0.1 that records every request it receives and answers 404."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.received: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                try:
                    self.received.append(conn.recv(65536))
                    conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                except OSError:
                    pass

    def operator_keys_seen(self) -> list[bytes]:
        return [k for k in OPERATOR_KEYS for r in self.received if k in r]

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(scope="module")
def places(s3, tmp_path_factory):
    """The operator's local warehouse (db.t), a table outside it (other/db/secret), the
    operator's S3 warehouse (s3://<bucket>/wh with db.t)."""
    base = tmp_path_factory.mktemp("operator")
    wh, other = base / "wh", base / "other"
    degraded_table(str(wh / "db" / "t.lance"), fragments=4, rows_per_fragment=10)
    degraded_table(str(other / "db" / "secret.lance"), fragments=3, rows_per_fragment=10)
    bucket_wh = s3.fresh_bucket("operator") + "/wh"
    degraded_table(f"{bucket_wh}/db/t.lance", fragments=3, rows_per_fragment=10, storage_options=s3.storage_options)
    return {"wh": wh, "other": other, "s3wh": bucket_wh, "base": base}


def operator_conf(places, s3) -> dict[str, str]:
    """The operator's static settings besides `lance` over the local warehouse: `ops3`, a
    catalog over the S3 warehouse with credentials."""
    conf = {"spark.sql.catalog.ops3": CATALOG_CLASS, "spark.sql.catalog.ops3.warehouse": places["s3wh"]}
    conf.update({f"spark.sql.catalog.ops3.storage.{k}": v for k, v in s3.storage_options.items()})
    return conf


@pytest.fixture(scope="module")
def recorder(s3):
    """A proxy in front of the S3 server that records whose key signed each request."""
    with FaultProxy(s3.endpoint) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def spark(places, s3, recorder):
    old = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    os.environ.update(AWS_ACCESS_KEY_ID=ENV_KEY_ID, AWS_SECRET_ACCESS_KEY=ENV_SECRET)
    # opproxy: the operator's S3 catalog with its keys, reached through the recorder; cleanup's
    # floor lowered (as the docs suggest) so that delete_unverified reads file ages
    conf = {**operator_conf(places, s3), "spark.sql.catalog.opproxy": CATALOG_CLASS,
            "spark.sql.catalog.opproxy.warehouse": places["s3wh"], CLEANUP_FLOOR_KEY: "1 hour",
            **{f"spark.sql.catalog.opproxy.storage.{k}": v
               for k, v in dict(s3.storage_options, aws_endpoint=recorder.endpoint).items()}}
    session = lance_session("local[2]", "operator-catalog", str(places["wh"]), conf)
    yield session
    session.stop()
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture
def listener():
    server = Listener()
    yield server
    server.close()


def secret_version(places) -> int:
    return lance.dataset(str(places["other"] / "db" / "secret.lance")).version


def attacks(places, endpoint: str) -> dict[str, tuple[list[tuple[str, str]], str, str]]:
    """name -> (SETs, the statement, the key the refusal names)."""
    other, s3wh = str(places["other"]), places["s3wh"]
    lance_ = "spark.sql.catalog.lance."
    ops3 = "spark.sql.catalog.ops3."
    secret = "SELECT count(*) FROM lance.db.secret"
    layout = f"CALL ops3.describe_layout(table => '{s3wh}/db/t.lance')"
    return {
        "warehouse": ([(lance_ + "warehouse", other)], secret, lance_ + "warehouse"),
        "warehouse_case": ([(lance_ + "WAREHOUSE", other)], secret, lance_ + "WAREHOUSE"),
        "impl_root": ([(lance_ + "impl", "dir"), (lance_ + "root", other)], secret, lance_ + "impl"),
        "root": ([(lance_ + "root", other)], secret, lance_ + "root"),
        "single_level_ns": ([(lance_ + "single_level_ns", "true")], "SHOW NAMESPACES IN lance",
                            lance_ + "single_level_ns"),
        "read_max_rows": ([(lance_ + "distributed_reads", "false"), (lance_ + "read_max_rows", "999999999999")],
                          "SELECT count(*) FROM lance.db.t", lance_ + "distributed_reads"),
        "maintain": ([(lance_ + "maintain.older_than", "0 seconds")], "SELECT count(*) FROM lance.db.t",
                     lance_ + "maintain.older_than"),
        "endpoint": ([(ops3 + "storage.aws_endpoint", endpoint), (ops3 + "storage.allow_http", "true")],
                     layout, ops3 + "storage.aws_endpoint"),
        "endpoint_case": ([(ops3 + "storage.AWS_ENDPOINT", endpoint)], layout, ops3 + "storage.AWS_ENDPOINT"),
        "endpoint_alias": ([(ops3 + "storage.endpoint", endpoint)], layout, ops3 + "storage.endpoint"),
        "s3_warehouse": ([(ops3 + "warehouse", "s3://another-bucket/wh")],
                         "CALL ops3.describe_layout(table => 's3://another-bucket/wh/db/t.lance')", ops3 + "warehouse"),
    }


def refusal(key: str) -> str:
    catalog = key.split(".")[3]
    return f"catalog {catalog}: {key} is set by the operator and cannot be changed in a session"


def test_operator_catalog_serves_a_fresh_session(spark, places):
    fresh = spark.newSession()
    # the operator's own value, SET again, is no change
    fresh.sql(f"SET spark.sql.catalog.lance.warehouse={places['wh']}")
    assert fresh.sql("SELECT count(*) FROM lance.db.t").collect()[0][0] == lance.dataset(
        str(places["wh"] / "db" / "t.lance")).count_rows()
    row = spark.newSession().sql(f"CALL ops3.describe_layout(table => 'db.t')").collect()[0]
    assert row is not None


@pytest.mark.parametrize("name", ["warehouse", "warehouse_case", "impl_root", "root", "single_level_ns",
                                  "read_max_rows", "maintain", "endpoint", "endpoint_case", "endpoint_alias",
                                  "s3_warehouse"])
def test_set_in_a_fresh_session_is_refused(spark, places, listener, name):
    sets, statement, key = attacks(places, listener.endpoint)[name]
    before = secret_version(places)
    fresh = spark.newSession()
    for k, v in sets:
        fresh.sql(f"SET {k}={v}")
    with pytest.raises(Exception) as e:
        fresh.sql(statement).collect()
    assert refusal(key) in str(e.value), str(e.value)[:2000]
    assert listener.received == [] and secret_version(places) == before
    # RESET gives the session the operator's catalog back
    for k, _ in sets:
        fresh.sql(f"RESET {k}")
    assert fresh.sql("SELECT count(*) FROM lance.db.t").collect()[0][0] > 0


def test_set_after_first_use_is_not_applied(spark, places):
    fresh = spark.newSession()
    n = fresh.sql("SELECT count(*) FROM lance.db.t").collect()[0][0]
    fresh.sql(f"SET spark.sql.catalog.lance.warehouse={places['other']}")
    assert fresh.sql("SELECT count(*) FROM lance.db.t").collect()[0][0] == n
    with pytest.raises(Exception, match="TABLE_OR_VIEW_NOT_FOUND|cannot be found"):
        fresh.sql("SELECT count(*) FROM lance.db.secret").collect()


def test_a_users_own_catalog_gets_no_operator_credential(spark, places, listener):
    """A catalog defined by SET over the operator's bucket with the user's endpoint: the
    requests reach the listener unsigned: neither ops3's key id nor the driver's environment's."""
    fresh = spark.newSession()
    mine = "spark.sql.catalog.mine"
    for k, v in [(mine, CATALOG_CLASS), (mine + ".warehouse", places["s3wh"]),
                 (mine + ".storage.aws_endpoint", listener.endpoint), (mine + ".storage.allow_http", "true"),
                 (mine + ".storage.aws_region", "us-east-1"),
                 # an attempt to turn the unsigned mode off again
                 (mine + ".storage.aws_skip_signature", "false")]:
        fresh.sql(f"SET {k}={v}")
    with pytest.raises(Exception):
        fresh.sql(f"CALL mine.describe_layout(table => '{places['s3wh']}/db/t.lance')").collect()
    assert listener.received, "the user's endpoint was not reached: the test proves nothing"
    assert listener.operator_keys_seen() == []
    assert not any(b"Authorization: AWS4" in r for r in listener.received)


def test_a_users_own_catalog_with_own_credentials_signs_with_them(spark, places, listener):
    fresh = spark.newSession()
    mine = "spark.sql.catalog.mine2"
    for k, v in [(mine, CATALOG_CLASS), (mine + ".warehouse", places["s3wh"]),
                 (mine + ".storage.aws_endpoint", listener.endpoint), (mine + ".storage.allow_http", "true"),
                 (mine + ".storage.aws_region", "us-east-1"),
                 (mine + ".storage.aws_access_key_id", "AKIAUSERSOWNKEY00001"),
                 (mine + ".storage.aws_secret_access_key", "users-own-secret")]:
        fresh.sql(f"SET {k}={v}")
    with pytest.raises(Exception):
        fresh.sql(f"CALL mine2.describe_layout(table => '{places['s3wh']}/db/t.lance')").collect()
    assert any(b"AKIAUSERSOWNKEY00001" in r for r in listener.received)
    assert listener.operator_keys_seen() == []


# ---- every request with the asking catalog's credentials, or unsigned (cleanup's file ages) ----

def public_warehouse(s3) -> str:
    """A warehouse in a bucket anyone may read and write (a policy for every principal): what a
    user's catalog without keys can use, its requests unsigned."""
    import json

    import boto3

    bucket = s3.fresh_bucket("public")
    name = bucket[len("s3://"):]
    boto3.client("s3", endpoint_url=s3.endpoint, region_name="us-east-1", aws_access_key_id=ACCESS_KEY_ID,
                 aws_secret_access_key="x").put_bucket_policy(Bucket=name, Policy=json.dumps({
                     "Version": "2012-10-17", "Statement": [{
                         "Effect": "Allow", "Principal": "*", "Action": "s3:*",
                         "Resource": [f"arn:aws:s3:::{name}", f"arn:aws:s3:::{name}/*"]}]}))
    return bucket + "/wh"


def orphaned_table(s3, warehouse: str, name: str) -> str:
    """A table in ``warehouse`` on the S3 server with an unreferenced data file (a writer's,
    before its commit): delete_unverified reads its age. Returns its path below the bucket."""
    from lance.fragment import write_fragments

    uri = f"{warehouse}/db/{name}.lance"
    degraded_table(uri, fragments=3, rows_per_fragment=10, storage_options=s3.storage_options)
    write_fragments(lance.dataset(uri, storage_options=s3.storage_options).to_table(limit=3), uri,
                    storage_options=s3.storage_options)
    return uri.split("://", 1)[1].split("/", 1)[1]


def cleanup_through(session, catalog: str, recorder, path: str) -> list:
    """delete_unverified (dry run and real) on db.<table> of ``catalog``; the key ids of the
    requests the recorder saw for the table (None: unsigned)."""
    table = path.rsplit("/", 1)[-1][: -len(".lance")]
    recorder.signed.clear()
    for dry in ("true", "false"):
        r = session.sql(f"CALL {catalog}.cleanup(table => 'db.{table}', delete_unverified => true, "
                        f"dry_run => {dry})").collect()[0]
        assert r.data_files_removed == 0  # the orphan is younger than the floor: kept
    seen = recorder.signers(path)
    # the file ages were read: the table's data files were listed through the recorder
    assert any("list-type=2" in p for _, p, _ in recorder.signed), list(recorder.signed)[:20]
    return seen


def test_cleanup_of_a_users_own_catalog_sends_every_request_unsigned(spark, places, s3, recorder):
    """A user's catalog without keys, pointed (by the user) at an endpoint, the driver's
    environment holding AWS keys: Lance's requests AND the file-age reads are unsigned (was:
    Lance's unsigned, pyarrow's HEAD of the orphan signed with the environment's key)."""
    warehouse = public_warehouse(s3)
    path = orphaned_table(s3, warehouse, "orphans_mine")
    fresh = spark.newSession()
    mine = "spark.sql.catalog.minecleanup"
    for k, v in [(mine, CATALOG_CLASS), (mine + ".warehouse", warehouse),
                 (mine + ".storage.aws_endpoint", recorder.endpoint), (mine + ".storage.allow_http", "true"),
                 (mine + ".storage.aws_region", "us-east-1")]:
        fresh.sql(f"SET {k}={v}")
    seen = cleanup_through(fresh, "minecleanup", recorder, path)
    assert seen and set(seen) == {None}, sorted(set(map(str, seen)))


def test_cleanup_of_the_operators_catalog_signs_with_its_own_key_only(spark, places, s3, recorder):
    path = orphaned_table(s3, places["s3wh"], "orphans_operator")
    seen = cleanup_through(spark.newSession(), "opproxy", recorder, path)
    assert seen and set(seen) == {ACCESS_KEY_ID}, sorted(set(map(str, seen)))


# ---- the catalog's read source: no name SQL can give it ----

READ_SOURCE_CLASS = "org.apache.spark.sql.execution.datasources.v2.python.LanceCompactReadSource"


def read_requests(places, s3, endpoint: str) -> dict[str, dict | None]:
    """name -> the ``request`` option an attacker passes (None: none at all): forged ones for
    a table outside the warehouse and one inside, a genuine request of the catalog's scan as it
    builds it (copied, replayed), and one for the operator's bucket at the user's endpoint with
    no keys (the driver's environment holds AWS keys)."""
    columns = {"columns": ["id"], "partition_bytes": 134217728}
    bucket_path = places["s3wh"].split("://", 1)[1]
    return {
        "outside": {"table": "x", "uri": str(places["other"] / "db" / "secret.lance"), **columns},
        "inside": {"table": "db.t", "uri": str(places["wh"] / "db" / "t.lance"), **columns},
        "replayed": {"table": "ops3.db.t", "uri": f"{places['s3wh']}/db/t.lance",
                     "storage_options": s3.storage_options, **columns},
        "users_endpoint": {"table": "x", "uri": f"s3://{bucket_path}/db/t.lance", "storage_options": {
            "aws_endpoint": endpoint, "allow_http": "true", "aws_region": "us-east-1"}, **columns},
        "none": None,
    }


def read_source_statements(request: dict | None) -> list[str]:
    """Every way SQL can name a data source, with ``request`` as its option."""
    import json

    options = "partitions '[[0],[1],[2]]'" + (
        "" if request is None else ", request '" + json.dumps(request).replace("'", "\\'") + "'")
    return [f"CREATE OR REPLACE TEMPORARY VIEW leak (id BIGINT) USING {name} OPTIONS ({options})"
            for name in ("lance_compact_read", "LANCE_COMPACT_READ", "pyspark_lance_compact",
                         READ_SOURCE_CLASS, "lance_compact.catalog.read_source.LanceFragmentSource",
                         "`lance_compact_read`")]


@pytest.mark.parametrize("attack", ["outside", "inside", "replayed", "users_endpoint", "none"])
def test_the_read_source_cannot_be_named_from_sql(spark, places, s3, recorder, attack):
    """The catalog's distributed read is registered under no name: every statement naming it
    (by its name, its old module, its JVM class, its Python class) is refused before anything
    is read or any request is sent (was: ``USING lance_compact_read OPTIONS (request ...)`` read
    a table outside the warehouse, and signed requests to the user's endpoint with the
    environment's key)."""
    request = read_requests(places, s3, recorder.endpoint)[attack]
    before = secret_version(places)
    recorder.signed.clear()
    fresh = spark.newSession()
    for statement in read_source_statements(request):
        with pytest.raises(Exception) as e:
            fresh.sql(statement).collect()
            fresh.sql("SELECT * FROM leak").collect()  # never reached: the view is refused
        message = str(e.value)
        assert "DATA_SOURCE_NOT_FOUND" in message or "cannot be named in SQL" in message, \
            (statement[:120], message[:1500])
        assert ENV_SECRET not in message and s3.storage_options["aws_secret_access_key"] not in message
    with pytest.raises(Exception, match="DATA_SOURCE_NOT_FOUND"):
        reader = fresh.read.format("lance_compact_read").option("partitions", "[[0]]")
        if request is not None:
            import json
            reader = reader.option("request", json.dumps(request))
        reader.schema("id BIGINT").load().collect()
    assert list(recorder.signed) == [], list(recorder.signed)[:10]  # nothing sent, signed or not
    assert secret_version(places) == before


def test_catalog_reads_still_run_on_the_executors(spark, places, s3):
    """SELECT on the operator's local and S3 catalogs: the distributed read (a Python data
    source scan in the plan), rows exact."""
    fresh = spark.newSession()
    for table, expected in (("lance.db.t", lance.dataset(str(places["wh"] / "db" / "t.lance")).count_rows()),
                            ("ops3.db.t", lance.dataset(f"{places['s3wh']}/db/t.lance",
                                                        storage_options=s3.storage_options).count_rows())):
        plan = fresh.sql(f"EXPLAIN SELECT id FROM {table}").collect()[0][0]
        assert "(Python)" in plan, plan
        assert fresh.sql(f"SELECT id FROM {table}").count() == expected
        assert "planted-secret" not in plan and ENV_SECRET not in plan


# ---- the same attacks through the spark-sql CLI and the Thrift server ----

def driver_env() -> dict[str, str]:
    """A driver as the operator starts it: no test hooks; credentials in its environment."""
    env = cs.spark_env()
    env.pop("LANCE_COMPACT_TEST_HOOKS", None)
    env.update(AWS_ACCESS_KEY_ID=ENV_KEY_ID, AWS_SECRET_ACCESS_KEY=ENV_SECRET)
    return env


def properties(places, s3, path: Path) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in operator_conf(places, s3).items()))
    path.chmod(0o600)
    return path


CLI_ATTACKS = ["warehouse", "impl_root", "endpoint", "endpoint_case", "s3_warehouse"]


def script(places, endpoint: str, names, alive: bool = True) -> str:
    lines = []
    for name in names:
        sets, statement, _ = attacks(places, endpoint)[name]
        lines += [f"SET {k}={v};" for k, v in sets] + [statement + ";"] + [f"RESET {k};" for k, _ in sets]
    return "\n".join(lines + (["SELECT 'alive', count(*) FROM lance.db.t;"] if alive else [])) + "\n"


def test_spark_sql_cli(places, s3, listener, tmp_path):
    before = secret_version(places)
    sql = tmp_path / "attacks.sql"
    sql.write_text(script(places, listener.endpoint, CLI_ATTACKS))
    p = subprocess.run(
        [str(ROOT / "bin" / "lance-spark-sql"), "--warehouse", str(places["wh"]), "--master", "local[2]",
         "--conf", "spark.ui.enabled=false", "--properties-file", str(properties(places, s3, tmp_path / "op.conf")),
         "--hiveconf", "hive.cli.errors.ignore=true", "-f", str(sql)],
        capture_output=True, text=True, timeout=600, env=driver_env(), cwd=tmp_path, stdin=subprocess.DEVNULL)
    for name in CLI_ATTACKS:
        assert refusal(attacks(places, "")[name][2]) in p.stderr, (name, p.stderr[-4000:])
    assert "alive\t" in p.stdout, p.stderr[-4000:]
    assert listener.received == [] and secret_version(places) == before


def test_thrift_server(places, s3, listener, tmp_path):
    """The warehouse and endpoint attacks over JDBC: each beeline connection is a fresh session."""
    before = secret_version(places)
    server = cs.thrift_server(places["wh"], tmp_path)
    server.env = driver_env()
    i = server.args.index("spark-internal")
    server.args[i:i] = ["--properties-file", str(properties(places, s3, tmp_path / "op.conf"))]
    server.start()
    try:
        with server.logs_on_failure():
            for name in ["warehouse", "endpoint"]:
                p = cs.beeline(server.port, script(places, listener.endpoint, [name], alive=False), tmp_path)
                out = p.stdout + p.stderr
                assert refusal(attacks(places, "")[name][2]) in out, (name, out[-4000:])
            # the server still serves the operator's catalog to the next session
            p = cs.beeline(server.port, "SELECT 'alive', count(*) FROM lance.db.t", tmp_path)
            assert "alive\t" in p.stdout, p.stdout + p.stderr[-4000:]
    finally:
        server.stop()
    assert listener.received == [] and secret_version(places) == before

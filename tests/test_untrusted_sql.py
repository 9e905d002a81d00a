"""An untrusted SQL user of a shared Thrift server, with only SET, CALL, SELECT, ALTER TABLE,
CREATE NAMESPACE and SHOW, against a server started as an operator would start it: no test
hooks, the catalog `lance` over a local warehouse, the catalog `lake` over an S3-compatible
store with the operator's keys, the engine's log kept. Every attack of docs/shared-servers.md's
table is tried here through beeline, each in a fresh JDBC session (a fresh SparkSession: its
catalogs are built from that session's SQL configuration on first use, which is what SET
attacks aim at). After each: the outcome the table promises, the tables untouched, the server
still answering."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import lance
import pyarrow as pa
import pytest

import client_servers as cs
from conftest import NO_VERSION_FLOOR
from lance_compact.api import CATALOG_CLASS
from oracle import degraded_table

KEY_ID = "AKIAOPERATOR0KEY0ID77"
SECRET = "operator-secret-key-do-not-leak-0123456789"
# The attackers' slow queries. A stage Spark submits just after a cancel runs to its end
# (docs/shared-servers.md), holding both task slots: each such leftover costs what the whole query
# costs. Measured with the tests' JVMs (C1 only): 60,000,000 rows 3.9 s of CPU, 600,000,000 35 s
# (about 17 s on 2 idle cores). Thrift's are cut by a 2 s query timeout, so they must outlast it
# many times over (600,000,000; was 6,000,000,000: a leftover took minutes of both slots); Connect's
# are interrupted 0.5 s after they start, and one of up to four must still be running then.
SLOW_THRIFT_ROWS = 600_000_000
SLOW_CONNECT_ROWS = 150_000_000


class Listener:
    """A TCP listener on 127.0.0.1 that keeps every byte it receives and answers nothing useful:
    where an attacker would point the operator's storage endpoint."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.5)
        self.port = self.sock.getsockname()[1]
        self.received = bytearray()
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            with conn:
                conn.settimeout(1)
                try:
                    while chunk := conn.recv(65536):
                        self.received += chunk
                        if b"\r\n\r\n" in chunk:
                            conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
                except OSError:
                    pass

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()


def _rows(n: int, start: int = 0) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()),
                     "v": pa.array([f"r{i}" for i in range(start, start + n)])})


@pytest.fixture(scope="module")
def shared(tmp_path_factory, s3):
    """The operator's Thrift server and what it serves: yields a namespace of paths and the server."""
    root = tmp_path_factory.mktemp("untrusted")
    wh, outside, workdir = root / "wh", root / "outside", root / "server"
    for d in (wh / "db", outside / "x", workdir):
        d.mkdir(parents=True)
    degraded_table(str(wh / "db" / "t.lance"), fragments=12, rows_per_fragment=30)
    degraded_table(str(outside / "x" / "secret.lance"), fragments=12, rows_per_fragment=30)
    os.symlink(outside / "x" / "secret.lance", wh / "db" / "link.lance")
    aged = str(wh / "db" / "aged.lance")
    lance.write_dataset(_rows(200), aged, max_rows_per_file=20)
    lance.dataset(aged).create_scalar_index("id", "BTREE")
    lance.write_dataset(_rows(40, 1000), aged, mode="append", max_rows_per_file=20)

    bucket = s3.fresh_bucket("untrusted")
    lake = f"{bucket}/wh"
    degraded_table(f"{lake}/db/t.lance", fragments=6, rows_per_fragment=20, storage_options=s3.storage_options)
    storage = dict(s3.storage_options, aws_access_key_id=KEY_ID, aws_secret_access_key=SECRET)
    # moto accepts any key: the operator's are stand-ins that must never travel anywhere else
    # the operator switched the version-retention check off (its tables are seconds old)
    conf = {"spark.sql.catalog.lake": CATALOG_CLASS, "spark.sql.catalog.lake.warehouse": lake,
            **{f"spark.sql.catalog.lake.storage.{k}": v for k, v in storage.items()}, **NO_VERSION_FLOOR,
            # as docs/shared-servers.md tells an operator of a server shared by SQL users
            "spark.sql.extensions": "io.github.lancecompact.spark.SharedServerGuard"}
    props = workdir / "operator.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
    props.chmod(0o600)
    env = {k: v for k, v in cs.spark_env().items() if k != "LANCE_COMPACT_TEST_HOOKS"}
    server = cs.thrift_server(wh, workdir, extra=["--properties-file", str(props)], env=env)
    server.start()
    try:
        yield {"wh": wh, "outside": outside, "lake": lake, "server": server, "workdir": workdir,
               "engine_log": workdir / "thrift-engine.log"}
    finally:
        server.stop()


def sql(shared, statements: str, timeout: float = 180):
    """One fresh JDBC session running ``statements``; (return code, stdout + stderr)."""
    p = cs.beeline(shared["server"].port, statements, shared["workdir"], timeout=timeout)
    return p.returncode, p.stdout + p.stderr


def version(path) -> int:
    return lance.dataset(str(path)).version


def test_the_catalogs_read_source_cannot_be_named(shared):
    """The catalog's distributed read is no data source SQL can name: a forged read request for
    a table outside the warehouse, and one for the operator's bucket at the user's endpoint
    without keys, are refused before anything is read or sent (was: the outside table's rows;
    requests signed with the driver environment's key). Catalog reads, local and S3, work."""
    import json

    listener = Listener()
    try:
        bucket_path = shared["lake"].split("://", 1)[1]
        statements = []
        for request in ({"table": "x", "uri": str(shared["outside"] / "x" / "secret.lance"), "columns": ["id"]},
                        {"table": "x", "uri": f"s3://{bucket_path}/db/t.lance", "columns": ["id"],
                         "storage_options": {"aws_endpoint": f"http://127.0.0.1:{listener.port}",
                                             "allow_http": "true", "aws_region": "us-east-1"}}):
            for name in ("lance_compact_read", "org.apache.spark.sql.execution.datasources.v2.python."
                                               "LanceCompactReadSource"):
                statements += [f"CREATE OR REPLACE TEMPORARY VIEW leak (id BIGINT) USING {name} OPTIONS "
                               f"(request '{json.dumps(request)}', partitions '[[0],[1]]');",
                               "SELECT count(*) AS n FROM leak;"]
        # one JDBC session running every statement of a script (--force: on after an error)
        script = shared["workdir"] / "read_source.sql"
        script.write_text("\n".join(statements) + "\n")
        p = subprocess.run([os.path.join(cs.spark_home(), "bin", "beeline"), "-u",
                            f"jdbc:hive2://127.0.0.1:{shared['server'].port}", "--outputformat=tsv2",
                            "--force=true", "-f", str(script)], cwd=shared["workdir"],
                           env=cs.spark_env(SPARK_BEELINE_OPTS=f"-Duser.home={shared['workdir']}"),
                           capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
        out = p.stdout + p.stderr
        # the guard refuses both names as data sources the operator did not allow (without the
        # guard, Spark finds no source of the first name and the class refuses to be made)
        refused = [line for line in out.splitlines() if "SharedServerGuard" in line and "the data source" in line]
        assert sum("the data source lance_compact_read" in line for line in refused) >= 2 and sum(
            "LanceCompactReadSource" in line for line in refused) >= 2, (refused, out[-3000:])
        assert "\nn\n" not in out and not out.startswith("n\n"), out
        time.sleep(1)
        assert listener.connections == 0 and not listener.received, listener.received[:400]
    finally:
        listener.stop()
    code, out = sql(shared, "SELECT count(*) AS n FROM lake.db.t;\nSELECT count(*) AS n FROM lance.db.t;")
    assert code == 0 and [line.strip() for line in out.splitlines()].count("n") == 2, out


def test_set_cannot_re_point_the_operators_catalog(shared):
    secret = shared["outside"] / "x" / "secret.lance"
    code, out = sql(shared, f"SET spark.sql.catalog.lance.warehouse={shared['outside']};\n"
                            "SELECT count(*) AS n FROM lance.x.secret;")
    assert code != 0 and "spark.sql.catalog.lance.warehouse" in out, out
    assert "\nn\n" not in out
    code, out = sql(shared, "SET spark.sql.catalog.lance.impl=dir;\n"
                            f"SET spark.sql.catalog.lance.root={shared['outside']};\nSHOW NAMESPACES IN lance;")
    assert code != 0 and "spark.sql.catalog.lance." in out, out
    assert version(secret) == 1 or lance.dataset(str(secret)).version == version(secret)


def test_the_operators_keys_go_only_to_the_operators_endpoint(shared):
    listener = Listener()
    try:
        for attack in (
                # re-point the operator's catalog that holds the keys
                f"SET spark.sql.catalog.lake.storage.aws_endpoint=http://127.0.0.1:{listener.port};\n"
                "SET spark.sql.catalog.lake.storage.allow_http=true;\n"
                "CALL lake.describe_layout(table => 'db.t');",
                # a catalog of the user's own over the operator's bucket, at the user's endpoint
                f"SET spark.sql.catalog.mine={CATALOG_CLASS};\n"
                f"SET spark.sql.catalog.mine.warehouse={shared['lake']};\n"
                f"SET spark.sql.catalog.mine.storage.aws_endpoint=http://127.0.0.1:{listener.port};\n"
                "SET spark.sql.catalog.mine.storage.allow_http=true;\n"
                "SET spark.sql.catalog.mine.storage.aws_region=us-east-1;\n"
                "CALL mine.describe_layout(table => 'db.t');"):
            code, out = sql(shared, attack)
            assert code != 0, out
            assert KEY_ID not in out and SECRET not in out
        time.sleep(1)
        assert KEY_ID.encode() not in listener.received, listener.received[:400]
        assert SECRET.encode() not in listener.received
    finally:
        listener.stop()
    code, out = sql(shared, "CALL lake.describe_layout(table => 'db.t');")
    assert code == 0, out  # the operator's own catalog still works at the operator's endpoint


@pytest.mark.parametrize("statement", [
    "SELECT count(*) FROM lance.db.link",
    "SELECT * FROM lance.db.link.fragments",
    "ALTER TABLE lance.db.link SET TBLPROPERTIES ('lance_compact.maintain.priority' = '7')",
    "CALL lance.compact(table => 'db.link')",
    "CALL lance.describe_layout(table => 'db.link')",
    "DROP INDEX id_idx ON lance.db.link",
    "CREATE INDEX IF NOT EXISTS cat_idx ON lance.db.link USING BITMAP (category)",
])
def test_a_symlink_out_of_the_warehouse_is_refused_everywhere(shared, statement):
    secret = shared["outside"] / "x" / "secret.lance"
    before = version(secret)
    code, out = sql(shared, statement + ";")
    assert code != 0 and "outside the warehouse" in out, out
    assert version(secret) == before


def test_the_warehouse_wide_paths_leave_a_symlinked_table_alone(shared):
    secret = shared["outside"] / "x" / "secret.lance"
    before = version(secret)
    code, out = sql(shared, "SELECT concat(namespace, '.', `table`) AS t FROM lance.system.table_health;\n"
                            "CALL lance.maintain_warehouse(namespace => 'db', older_than => '0 seconds', "
                            "dry_run => true);")
    assert code == 0, out
    assert "db.link" not in out.replace("db.link.lance", "")
    assert version(secret) == before


def test_namespaces_cannot_be_made_inside_a_table(shared):
    for name in ("`t.lance`.`_versions`", "`evil.lance`", "`_versions`"):
        code, out = sql(shared, f"CREATE NAMESPACE lance.db.{name};")
        assert code != 0, (name, out)
    assert not (shared["wh"] / "db" / "t.lance" / "_versions" / "evil").exists()
    assert sql(shared, "SELECT count(*) FROM lance.db.t;")[0] == 0


def test_cleanup_never_removes_a_write_in_flight(shared):
    uri = str(shared["wh"] / "db" / "t.lance")
    rows_before = lance.dataset(uri).count_rows()
    pending = lance.fragment.write_fragments(lance.dataset(uri).to_table(limit=25), uri)
    files = [Path(uri) / "data" / f.path for m in pending for f in m.files]
    two_hours_ago = time.time() - 7200
    for f in files:
        os.utime(f, (two_hours_ago, two_hours_ago))
    for statement in ("CALL lance.cleanup(table => 'db.t', delete_unverified => true)",
                      "CALL lance.cleanup(table => 'db.t', delete_unverified => true, "
                      "unverified_min_age => '0 seconds')",
                      "CALL lance.cleanup(table => 'db.t', older_than => '0 seconds', delete_unverified => true, "
                      "unverified_min_age => '1 second')"):
        sql(shared, statement + ";")
        assert all(f.exists() for f in files), statement
    ds = lance.dataset(uri)
    lance.LanceDataset.commit(uri, lance.LanceOperation.Append(pending), read_version=ds.version)
    assert lance.dataset(uri).to_table().num_rows == rows_before + 25


def test_a_property_lance_cannot_use_is_refused(shared):
    path = shared["wh"] / "db" / "t.lance"
    before = version(path)
    code, out = sql(shared, "ALTER TABLE lance.db.t SET TBLPROPERTIES "
                            "('lance.compaction.data_storage_version' = 'garbage!!');")
    assert code != 0 and "lance.compaction.data_storage_version" in out, out
    assert version(path) == before
    assert "data_storage_version" not in str(lance.dataset(str(path)).config())


def test_an_input_that_makes_lance_panic_fails_its_statement_and_the_server_goes_on(shared):
    started = time.monotonic()
    code, out = sql(shared, "CALL lance.cleanup(table => 'db.t', older_than => '100000000 days', dry_run => true);",
                    timeout=120)
    assert code != 0 and time.monotonic() - started < 90, out
    code, out = sql(shared, "SELECT count(*) AS n FROM lance.db.t;")
    assert code == 0, out


def test_an_aged_table_reads_as_healthy_history(shared):
    code, out = sql(shared, "CALL lance.compact(table => 'db.aged', target_rows_per_fragment => 1000);\n"
                            "CALL lance.cleanup(table => 'db.aged', older_than => '0 seconds');\n"
                            "CALL lance.describe_layout(table => 'db.aged');\n"
                            "SELECT `table`, error FROM lance.system.table_health WHERE `table` = 'aged';")
    assert code == 0, out
    assert "does not exist" not in out
    assert "aged\tNULL" in out or "aged\t\n" in out + "\n", out


def test_identifiers_with_control_characters_are_refused_and_forge_no_log_line(shared):
    code, out = sql(shared, "CALL lance.describe_layout(table => 'db.t\\nFORGED INFO lance_compact.engine: x');")
    assert code != 0, out
    assert "FORGED" not in shared["engine_log"].read_text(errors="replace")


def test_a_users_secret_named_option_does_not_blind_the_operators_log(shared):
    sql(shared, f"SET spark.sql.catalog.mine={CATALOG_CLASS};\n"
                f"SET spark.sql.catalog.mine.warehouse={shared['wh']};\n"
                "SET spark.sql.catalog.mine.storage.my_secret=describe;\n"
                "CALL mine.describe_layout(table => 'db.t');")
    mark = len(shared["engine_log"].read_text(errors="replace"))
    code, out = sql(shared, "CALL lance.describe_layout(table => 'db.t');")
    assert code == 0, out
    later = shared["engine_log"].read_text(errors="replace")[mark:]
    assert "describe" in later or "layout" in later, later


def test_test_hooks_and_unregistered_strategies_do_not_exist_here(shared):
    path = shared["wh"] / "db" / "t.lance"
    before = version(path)
    for statement in ("CALL lance.compact(table => 'db.t', options => map('test_before_commit', 'shutil.rmtree'))",
                      "CALL lance.compact(table => 'db.t', strategy => 'os.system')"):
        code, out = sql(shared, statement + ";")
        assert code != 0 and ("unknown" in out), out
    assert version(path) == before and (path / "data").is_dir()


def script_sql(shared, statements: list[str], name: str, *options: str) -> str:
    """One JDBC session running every statement (on after an error: --force); its output.
    ``options``: more beeline options (``-n <user>``)."""
    script = shared["workdir"] / name
    script.write_text("".join(f"{s};\n" for s in statements))
    p = subprocess.run([os.path.join(cs.spark_home(), "bin", "beeline"), "-u",
                        f"jdbc:hive2://127.0.0.1:{shared['server'].port}", "--outputformat=tsv2",
                        "--force=true", *options, "-f", str(script)], cwd=shared["workdir"],
                       env=cs.spark_env(SPARK_BEELINE_OPTS=f"-Duser.home={shared['workdir']}"),
                       capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    return p.stdout + p.stderr


def connection_sql(shared, statements: list[str], name: str, conf: dict[str, str] | None = None,
                   hivevars: dict[str, str] | None = None) -> str:
    """script_sql in a session whose JDBC connection string carries settings
    (``jdbc:hive2://host:port/;?k=v;...#var=v``), percent-encoded as a URL needs them."""
    from urllib.parse import quote

    def part(d):
        return ";".join(f"{k}={quote(v, safe='/:.')}" for k, v in d.items())
    url = f"jdbc:hive2://127.0.0.1:{shared['server'].port}/"
    url += (f";?{part(conf)}" if conf else "") + (f"#{part(hivevars)}" if hivevars else "")
    script = shared["workdir"] / name
    script.write_text("".join(f"{s};\n" for s in statements))
    p = subprocess.run([os.path.join(cs.spark_home(), "bin", "beeline"), "-u", url, "--outputformat=tsv2",
                        "--force=true", "-f", str(script)], cwd=shared["workdir"],
                       env=cs.spark_env(SPARK_BEELINE_OPTS=f"-Duser.home={shared['workdir']}"),
                       capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    return p.stdout + p.stderr


def test_substitution_and_a_connection_strings_settings_reach_no_secret_or_catalog(shared):
    """Fourth attack pass (issue 41), as a beeline user of the guarded server: Spark's variable
    substitution answered ``SELECT '${system:spark.sql.catalog.lake.storage.aws_access_key_id}'``
    with the operator's key (spark-submit makes the properties file's settings system
    properties), ``${env:...}`` the server's environment. A connection string's settings are
    applied without SET: ``;?spark.sql.catalog.lake=<Spark's JDBC catalog>;...url=jdbc:derby:<path>``
    re-registered the operator's catalog as a Derby database made at the user's path (whose
    sessionInitStatement can bind a SQL function to System.getProperty), ``;?spark.sql.legacy.
    setCommandRejectsSparkCoreConfs=false;spark.redaction.regex=...`` made ``SET <key>`` answer it
    in clear, and Hive substituted ``;?x=${system:<key>}`` when it opened the session (``SET x``:
    the key), also after ``hive.variable.substitute=true`` in the same string. ``parquet.`<path>` ``
    opened any path while Spark resolved the name (its error told whether the path exists).
    Each is refused now (the session, or every statement of it); the key is in no output."""
    derby = shared["workdir"] / "derby_by_url"
    key_id = "${system:spark.sql.catalog.lake.storage.aws_access_key_id}"
    secret = "${system:spark.sql.catalog.lake.storage.aws_secret_access_key}"
    outs = {
        "substitution": script_sql(shared, [f"SELECT '{key_id}' AS v", f"SELECT '{secret}' AS v",
                                            "SELECT '${env:PYSPARK_PYTHON}' AS v",
                                            f"CREATE TEMPORARY VIEW leak AS SELECT '{key_id}' AS v",
                                            f"SELECT * FROM parquet.`{shared['workdir'] / 'operator.properties'}`",
                                            "SELECT * FROM orc.`/nonexistent/x`"], "substitution.sql"),
        "catalog": connection_sql(shared, ["SHOW NAMESPACES IN lake", "SELECT count(*) FROM lake.db.t"],
                                  "by_url_catalog.sql", {
                                      "spark.sql.catalog.lake": "org.apache.spark.sql.execution.datasources.v2.jdbc."
                                                                "JDBCTableCatalog",
                                      "spark.sql.catalog.lake.url": f"jdbc:derby:{derby}",
                                      "spark.sql.catalog.lake.create": "true"}),
        "redaction": connection_sql(shared, ["SET spark.sql.catalog.lake.storage.aws_access_key_id",
                                             "SET spark.sql.catalog.lake.storage.aws_secret_access_key"],
                                    "by_url_redaction.sql", {
                                        "spark.sql.legacy.setCommandRejectsSparkCoreConfs": "false",
                                        "spark.redaction.regex": "nothing-matches-this"}),
        "hive": connection_sql(shared, ["SET x", "SELECT '${x}' AS v", "SELECT '${hivevar:y}' AS v"],
                               "by_url_hive.sql", {"x": key_id}, {"y": key_id}),
        "hive_on": connection_sql(shared, ["SET x"], "by_url_hive_on.sql",
                                  {"hive.variable.substitute": "true", "x": key_id}),
    }
    for name, out in outs.items():
        assert KEY_ID not in out and SECRET not in out and sys.executable not in out, (name, out[-3000:])
    substitution = [line for line in outs["substitution"].splitlines() if line.startswith("Error:")]
    assert len(substitution) == 6 and all("SharedServerGuard" in e for e in substitution[:4]), substitution
    assert all("TABLE_OR_VIEW_NOT_FOUND" in e for e in substitution[4:]), substitution  # no file was opened
    for name in ("catalog", "redaction", "hive"):
        assert "Failed to open new session" in outs[name] and "SharedServerGuard" in outs[name], (name, outs[name][-3000:])
    assert "Cannot modify hive.variable.substitute" in outs["hive_on"], outs["hive_on"][-3000:]
    assert not derby.exists()
    code, out = sql(shared, "SELECT count(*) AS n FROM lake.db.t;")
    assert code == 0 and out.startswith("n\n"), out


def test_percent_escaped_dot_segments_do_not_leave_the_operators_s3_warehouse(shared, s3):
    """``%2e%2e`` is '..' to Lance's URL parsing: the operator's catalog on S3 (with its keys)
    read, described and cleaned up a table beside its warehouse. Now each is refused naming
    the spelling, nothing outside is read or written, and versions and names a table cannot
    have are refused with words (was: an empty message, a raw `o45.sql` error)."""
    import boto3

    bucket = shared["lake"][: -len("/wh")]
    secret = f"{bucket}/outside/secret.lance"
    degraded_table(secret, fragments=4, rows_per_fragment=10, appends=2, storage_options=s3.storage_options)
    before = lance.dataset(secret, storage_options=s3.storage_options).version
    statements = [
        "SELECT count(*) AS leaked FROM lake.`%2e%2e`.outside.secret",
        f"CALL lake.describe_layout(table => '{bucket}/wh/%2e%2e/outside/secret.lance')",
        f"CALL lake.cleanup(table => '{bucket}/wh/%2E%2E/outside/secret.lance', older_than => '0 seconds')",
        f"CALL lake.compact(table => '{bucket}/wh/.%2e/outside/secret.lance')",
        f"CALL lake.describe_layout(table => 'S3://{bucket[5:]}/outside/secret.lance')",
        "CREATE NAMESPACE lake.`%2e%2e`.escaped",
    ]
    out = script_sql(shared, statements, "escapes.sql")
    errors = [line[:400] for line in out.splitlines() if line.startswith("Error:")]
    assert len(errors) == len(statements), errors or out[-4000:]
    assert all("is refused" in e or "is outside the warehouse" in e for e in errors), errors
    assert "leaked" not in out and "secret.lance\t" not in out, out[-4000:]
    assert lance.dataset(secret, storage_options=s3.storage_options).version == before
    client = boto3.client("s3", endpoint_url=s3.endpoint, region_name="us-east-1",
                          aws_access_key_id=s3.storage_options["aws_access_key_id"],
                          aws_secret_access_key=s3.storage_options["aws_secret_access_key"])
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket[5:]).get("Contents", [])]
    assert not [k for k in keys if k.startswith("escaped/")], keys
    out = script_sql(shared, ["SELECT * FROM lance.db.t VERSION AS OF '-1'", f"CREATE NAMESPACE lance.{'n' * 300}"],
                     "versions.sql")
    assert "table lance.db.t: VERSION AS OF '-1' is not a version of the table" in out, out[-4000:]
    assert "is too long" in out and "at most 255 bytes" in out, out[-4000:]


def test_one_user_cannot_cancel_another_users_statement(shared):
    """Two users of one Thrift server. The engine's job tags are numbered in order
    (``lance-compact-<engine>-request-<n>``), so mallory can name them: ``SET spark.job.tags``
    (a session setting Spark copies onto her queries' jobs) puts her jobs among victim's
    statement's, and when her own query is cancelled (her query timeout) the cancel watch
    cancelled victim's clustering too (seen: 2 of 6 of victim's CALLs failed with
    LANCE_CANCELLED "... part of cancelled job tags lance-compact-1-request-237"). A user's
    cancel, and her tags, must reach only her own statements."""
    n = 400_000
    lance.write_dataset(pa.table({"id": pa.array(range(n), pa.int64()),
                                  "k": pa.array([(i * 7919) % 1000 for i in range(n)], pa.int64())}),
                        str(shared["wh"] / "db" / "busy.lance"), max_rows_per_file=2000)
    calls = 6
    victim_sql = "".join(f"CALL lance.compact(table => 'db.busy', sort_order => '{c}');\n"
                         for c in ["id", "k"] * (calls // 2))
    tags = ",".join(f"lance-compact-{e}-request-{r}" for e in (1, 2, 3) for r in range(1, 1500))
    mallory_sql = (f"SET spark.job.tags={tags};\nSET spark.sql.thriftServer.queryTimeout=2;\n"
                   + f"SELECT count(*) FROM range(0, {SLOW_THRIFT_ROWS}, 1, 2);\n" * 12)
    victim: list[subprocess.CompletedProcess] = []
    thread = threading.Thread(target=lambda: victim.append(cs.beeline(
        shared["server"].port, victim_sql, shared["workdir"], "--force=true", "-n", "victim")))
    thread.start()
    time.sleep(2)
    mallory = cs.beeline(shared["server"].port, mallory_sql, shared["workdir"], "--force=true", "-n", "mallory")
    thread.join(timeout=600)
    # her queries outlast her timeout: the server cancelled them, so her cancels (with victim's tags) were sent
    said = mallory.stdout + mallory.stderr
    assert "timed out" in said.lower() or "cancel" in said.lower(), said[-3000:]
    out = victim[0].stdout + victim[0].stderr
    assert "LANCE_CANCELLED" not in out, [line[:300] for line in out.splitlines() if "CANCELLED" in line]
    assert sum(line.startswith("db.busy\tclustering") for line in victim[0].stdout.splitlines()) == calls, out[-3000:]


def test_the_operators_keys_cannot_be_read_with_spark_builtins(shared):
    """Not through a procedure but through Spark's own SQL on the same server: spark-submit
    gives the driver's configuration to the JVM as system properties, and Spark's ``reflect`` /
    ``java_method`` call any static Java method, so a SQL user read the operator's secret key
    (also by a Hive UDF made with CREATE TEMPORARY FUNCTION, and from the properties file with
    the text data source). Each leaked it until the operator's server had the SharedServerGuard
    extension (docs/shared-servers.md); with it each is refused."""
    props = shared["workdir"] / "operator.properties"
    key = "spark.sql.catalog.lake.storage.aws_secret_access_key"
    out = script_sql(shared, [
        f"SELECT java_method('java.lang.System', 'getProperty', '{key}') AS leaked",
        f"SELECT reflect('java.lang.System', 'getProperty', '{key}') AS leaked",
        "CREATE TEMPORARY FUNCTION hreflect AS 'org.apache.hadoop.hive.ql.udf.generic.GenericUDFReflect'",
        f"SELECT hreflect('java.lang.System', 'getProperty', '{key}') AS leaked",
        f"CREATE TEMPORARY VIEW props USING text OPTIONS (path '{props}')",
        "SELECT * FROM props"], "builtins.sql")
    assert SECRET not in out, [line[:200] for line in out.splitlines() if SECRET in line]
    assert out.count("SharedServerGuard") >= 4, out[-3000:]  # each one refused, not failing otherwise


def test_spark_sql_cannot_write_or_remove_files_or_lift_redaction(shared):
    """Spark's own SQL wrote and removed files where a beeline user said, with the guard on (attack
    pass, issue 33 item 8): ``CREATE DATABASE d LOCATION '<folder>'`` then ``DROP DATABASE d
    CASCADE`` deleted the folder; ``INSERT OVERWRITE DIRECTORY`` emptied one and wrote into it; CTAS,
    Hive and LIKE tables with a LOCATION wrote anywhere; ``ADD JAR``/``ADD FILE`` took any path; a
    global temporary view was read and replaced by every other session. And
    ``SET spark.sql.legacy.setCommandRejectsSparkCoreConfs=false`` then ``SET
    spark.redaction.regex=...`` made ``SET spark.sql.catalog.lake.storage.aws_access_key_id``
    answer the operator's key id. SharedServerGuard refuses each; the folders keep their files."""
    victim = shared["workdir"] / "victim_folder"
    victim.mkdir(exist_ok=True)
    (victim / "keep.txt").write_text("operator's")
    made = [shared["workdir"] / n for n in ("ctas", "hive", "like")]
    statements = [
        f"CREATE DATABASE evil LOCATION '{victim}'", "DROP DATABASE evil CASCADE",
        f"INSERT OVERWRITE DIRECTORY '{victim}' USING text SELECT 'pwned' AS v",
        f"INSERT OVERWRITE LOCAL DIRECTORY '{victim}' SELECT 'pwned'",
        f"CREATE TABLE ctas USING parquet LOCATION '{made[0]}' AS SELECT 1 AS a",
        f"CREATE TABLE hv (a INT) STORED AS TEXTFILE LOCATION '{made[1]}'",
        # deny by default: a Hive table (a SerDe class) is a data source the operator did not allow
        "CREATE TABLE hv_managed (a INT) STORED AS TEXTFILE",
        f"CREATE TABLE lk LIKE lance.db.t LOCATION '{made[2]}'",
        f"ALTER TABLE lance.db.t SET LOCATION '{victim}'",
        f"LOAD DATA LOCAL INPATH '{shared['workdir'] / 'operator.properties'}' INTO TABLE lance.db.t",
        f"ADD FILE {shared['workdir'] / 'operator.properties'}",
        "CREATE GLOBAL TEMPORARY VIEW shared_view AS SELECT 'anyone may replace me' AS s",
        "SET spark.sql.legacy.setCommandRejectsSparkCoreConfs=false",
        "SET spark.redaction.regex=nothing-matches-this",
        "SET spark.sql.redaction.options.regex=nothing-matches-this",
        "SET spark.sql.catalog.lake.storage.aws_access_key_id", "SET"]
    out = script_sql(shared, statements, "files_and_redaction.sql")
    refused = [line[:300] for line in out.splitlines() if line.startswith("Error:") and "SharedServerGuard" in line]
    assert len(refused) == 14, ([r[-160:] for r in refused], out[-4000:])
    assert KEY_ID not in out and SECRET not in out
    assert sorted(os.listdir(victim)) == ["keep.txt"] and not any(p.exists() for p in made)


def test_a_session_cannot_choose_the_program_spark_runs_for_a_read(shared, tmp_path):
    """Spark 4 runs its Python workers (a Python data source: the catalog's distributed read) with
    the session's ``spark.sql.execution.pyspark.python``: a beeline user's SET of it, then a
    SELECT on a lance table, started the user's program on the server (attack pass, issue 33 item
    8). The read is refused while the session's value differs from the driver's; RESET reads."""
    marker = tmp_path / "ran"
    program = tmp_path / "not_python.sh"
    program.write_text(f"#!/bin/sh\necho ran >> {marker}\nexec {sys.executable} \"$@\"\n")
    program.chmod(0o755)
    # the server's own Python (its PYSPARK_PYTHON): a session naming it reads, as a notebook's
    # configure_spark_with_lance_compact on a running JVM does
    out = script_sql(shared, [f"SET spark.sql.execution.pyspark.python={program}",
                              "SELECT count(*) AS chosen FROM lance.db.t WHERE id >= 0",
                              "RESET spark.sql.execution.pyspark.python",
                              "SELECT count(*) AS n FROM lance.db.t WHERE id >= 0",
                              f"SET spark.sql.execution.pyspark.python={sys.executable}",
                              "SELECT count(*) AS own FROM lance.db.t WHERE id >= 0"], "worker_python.sql")
    assert "spark.sql.execution.pyspark.python is set in this session" in out, out[-3000:]
    rows = lance.dataset(str(shared["wh"] / "db" / "t.lance")).count_rows()
    # the two SETs, the read after RESET, the read with the server's own Python
    assert out.count("1 row selected") == 4 and out.count(f"\n{rows}\n") == 2, out[-3000:]
    assert not marker.exists()


def test_a_users_create_index_is_bounded_and_drop_index_reaches_only_the_warehouse(shared):
    """CREATE INDEX and DROP INDEX through the guarded server (SharedServerGuard lets them
    through: they are the create_index and drop_index procedures): an option beyond its bound is
    refused by the engine before anything is built, as in a CALL; a valid one builds and drops."""
    path = shared["wh"] / "db" / "t.lance"
    before = version(path)
    code, out = sql(shared, "CREATE INDEX vec_idx ON lance.db.t USING IVF_PQ (vector) "
                            "OPTIONS (num_partitions = 10000000, num_sub_vectors = 2);")
    assert code != 0 and "num_partitions" in out, out
    code, out = sql(shared, "CREATE INDEX bad_idx ON lance.db.t USING BTREE (id) OPTIONS (test_before_commit = 'x');")
    assert code != 0 and "test_before_commit" in out, out
    assert version(path) == before and lance.dataset(str(path)).list_indices() == []
    code, out = sql(shared, "CREATE INDEX cat_idx ON lance.db.t USING BITMAP (category);\n"
                            "SELECT name, segments, unindexed_rows FROM lance.db.t.indices;\n"
                            "DROP INDEX cat_idx ON lance.db.t;\n"
                            "DROP INDEX IF EXISTS cat_idx ON lance.db.t;")
    assert code == 0 and "cat_idx" in out, out
    assert version(path) == before + 2 and lance.dataset(str(path)).list_indices() == []


def _clustered_table(path: Path, rows: int = 60_000) -> dict:
    lance.write_dataset(pa.table({"id": pa.array(range(rows), pa.int64()),
                                  "k": pa.array([(i * 7919) % 1000 for i in range(rows)], pa.int64())}),
                        str(path), max_rows_per_file=2000)
    return _content(path)


def _content(path: Path) -> dict:
    t = lance.dataset(str(path)).to_table()
    return dict(zip(t.column("id").to_pylist(), t.column("k").to_pylist()))


USERS = ("alice", "bob")


def _thrift_user_script(me: str, other: str, columns: tuple[str, str], priority: str) -> list[str]:
    """One user's JDBC session in the two-user test: keeps a temporary view, a session setting and
    a variable; looks for, changes and drops the other's (in this session: a session has its own);
    reads the other's persisted views (one a trap made with substitution off); puts guessed tags
    on her own queries and has them cancelled by her query timeout; runs two clustering
    compactions and changes a property of the table between them; then reads her own state."""
    return [
        f"CREATE TEMPORARY VIEW {me}_view AS SELECT '{me}-private-view' AS s",
        f"SET {me}.private={me}-private-value",
        f"DECLARE VARIABLE {me}_var STRING DEFAULT '{me}-private-variable'",
        # the other's session state: not found here, and changing or dropping it changes only mine
        f"SELECT * FROM {other}_view", f"SET {other}.private", f"SELECT {other}_var", "SHOW VIEWS",
        f"SET {other}.private=changed-by-{me}",
        f"CREATE OR REPLACE TEMPORARY VIEW {other}_view AS SELECT 'changed-by-{me}' AS s",
        f"DROP VIEW IF EXISTS {other}_view", "SET spark.sql.shuffle.partitions=3",
        # the other's persisted views (Spark's session catalog, shared): read as the reader's statements
        f"SELECT n AS {other}_count FROM default.{other}_count", f"SELECT * FROM default.{other}_trap",
        # tags naming the other's work, cancelled by the query timeout on slow queries of mine
        f"SET spark.job.tags=lance-compact,{other},spark-session,SparkConnect_OperationTag",
        "SET spark.sql.thriftServer.queryTimeout=2",
        f"SELECT count(*) FROM range(0, {SLOW_THRIFT_ROWS}, 1, 2)",
        "SET spark.sql.thriftServer.queryTimeout=0",
        f"CALL lance.compact(table => 'db.race', sort_order => '{columns[0]}')",
        f"ALTER TABLE lance.db.race SET TBLPROPERTIES ('lance_compact.maintain.priority' = '{priority}')",
        f"CALL lance.compact(table => 'db.race', sort_order => '{columns[1]}')",
        f"SELECT s AS {me}_own FROM {me}_view", f"SET {me}.private", f"SELECT {me}_var AS {me}_own_var"]


def test_two_thrift_users_cannot_see_change_or_cancel_each_others_work(shared):
    """Two users of one Thrift server at once, each the attacker of the other (issue 41; issue 33
    item 8 had one attacker): alice and bob each keep a temporary view, a session setting and a
    variable, and run clustering compactions of one table while the other looks for, changes and
    drops them, puts guessed tags on her own queries and has them cancelled (her query timeout),
    and changes the table's properties between her compactions. Each also made persisted views
    in Spark's session catalog beforehand: a count the other reads, and a trap, made with
    substitution off, whose text is ``SELECT '${system:<the operator's key id>}'``. Each sees
    every CALL of hers answered, her own state intact, nothing of the other's, and the trap's text
    as text (Spark parses a view with the settings it keeps from its creator's session, and the
    guard substitutes as Spark does; a reader whose own session substitutes is not its creator);
    no row is lost; the operator's key is in no output. (Persisted views are shared by Spark's
    session catalog: either user may replace or drop the other's; Spark has no authorization.)"""
    path = shared["wh"] / "db" / "race.lance"
    before = _clustered_table(path, rows=20_000)
    key_id = "${system:spark.sql.catalog.lake.storage.aws_access_key_id}"
    for me in USERS:
        setup = script_sql(shared, [f"CREATE OR REPLACE VIEW default.{me}_count AS SELECT count(*) AS n FROM lance.db.race",
                                    "SET spark.sql.variable.substitute=false",
                                    f"CREATE OR REPLACE VIEW default.{me}_trap AS SELECT '{key_id}' AS v"],
                           f"{me}_setup.sql", "-n", me)
        assert "Error" not in setup, setup[-3000:]
    outs: dict[str, str] = {}

    def run(me: str, statements: list[str]) -> None:
        outs[me] = script_sql(shared, statements, f"{me}.sql", "-n", me)

    threads = [threading.Thread(target=run, args=("alice", _thrift_user_script("alice", "bob", ("k", "id"), "3"))),
               threading.Thread(target=run, args=("bob", _thrift_user_script("bob", "alice", ("id", "k"), "7")))]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    print(f"two Thrift users: {time.monotonic() - started:.1f} s")
    for me, other in (USERS, USERS[::-1]):
        out = outs[me]
        lines = out.splitlines()
        assert KEY_ID not in out and SECRET not in out, me
        assert "CANCELLED" not in out.upper(), [line[:300] for line in lines if "ANCEL" in line.upper()]
        assert sum("db.race\tclustering\t" in line for line in lines) == 2, (me, out[-3000:])
        assert f"{other}-private" not in out, (me, out[-3000:])
        assert f"{other}.private\t<undefined>" in out and f"The table or view `{other}_view` cannot be found" in out, (
            me, out[-3000:])
        assert f"name `{other}_var` cannot be resolved" in out, (me, out[-3000:])
        # her own state, after the other's attempts: intact
        assert f"{me}_own\n{me}-private-view" in out and f"{me}.private\t{me}-private-value" in out, (me, out[-3000:])
        assert f"{me}_own_var\n{me}-private-variable" in out, (me, out[-3000:])
        # the other's persisted views: the count is read; the trap is parsed with the settings it
        # keeps from its creator's session (substitution off), so its text stays text
        assert f"{other}_count\n20000" in out, (me, out[-3000:])
        assert f"v\n{key_id}\n" in out, (me, out[-3000:])
    assert lance.dataset(str(path)).config().get("lance_compact.maintain.priority") in ("3", "7")
    assert _content(path) == before


@pytest.fixture(scope="module")
def operator_connect(shared):
    """A Spark Connect server over the same warehouses, started as the operator starts the Thrift
    one (the properties file with the S3 keys and the guard, no test hooks); yields a function
    making a Connect session for a user, and undoes pyspark's marking of this process as a Connect
    client afterwards."""
    from pyspark.sql import SparkSession

    from ports import free_port

    workdir = shared["workdir"] / "connect"
    workdir.mkdir(exist_ok=True)
    port = free_port()
    args = [os.path.join(cs.spark_home(), "bin", "spark-submit"), "--class", cs.CONNECT_SERVER_CLASS,
            *cs.local_args(workdir), *cs.catalog_args(shared["wh"], workdir / "connect-engine.log"),
            "--properties-file", str(shared["workdir"] / "operator.properties"),
            "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
            "--conf", f"spark.connect.grpc.binding.port={port}", "spark-internal"]
    env = {k: v for k, v in cs.spark_env().items() if k != "LANCE_COMPACT_TEST_HOOKS"}
    server = cs.SparkServer("connect-server", args, port, workdir, env=env).start()
    saved = {k: os.environ.get(k) for k in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE")}
    sessions = []

    def session(user: str):
        s = SparkSession.builder.remote(f"sc://127.0.0.1:{port}/;user_id={user}").create()
        sessions.append(s)
        return s

    try:
        with server.logs_on_failure():
            yield session
    finally:
        for s in sessions:
            s.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.stop()


def test_two_connect_users_cannot_see_or_cancel_each_others_work(shared, operator_connect):
    """Two Spark Connect users at once, each the attacker of the other (issue 41; issue 33 item 8
    had one attacker): alice and bob each keep a temporary view and settings (one by
    ``spark.conf.set``) in a working session that tags its work 'nightly' and runs a clustering
    compaction, while an attacking session of each user runs slow queries and calls
    interruptTag('nightly'), interruptAll() and interruptOperation(<a guessed id>) again and
    again. Interrupts end only the attacking session's own queries; each CALL answers; neither
    sees the other's view or settings, and a setting one sets (a catalog of her own, by
    ``spark.conf.set``: every statement of hers refused) does not reach the other. A Connect
    user's SQL is guarded as a Thrift user's: SET of a catalog, USING jdbc, reflect and
    ``${system:...}`` refused. No row is lost."""
    import uuid

    path = shared["wh"] / "db" / "race_connect.lance"
    before = _clustered_table(path, rows=20_000)
    work = {me: operator_connect(me) for me in USERS}
    attack = {me: operator_connect(me) for me in USERS}
    for me, s in work.items():
        s.addTag("nightly")
        attack[me].addTag("nightly")
        s.sql(f"CREATE TEMPORARY VIEW {me}_view AS SELECT '{me}-private-view' AS s").collect()
        s.conf.set(f"{me}.private", f"{me}-private-value")
        s.conf.set("spark.sql.shuffle.partitions", "3" if me == "alice" else "5")
    # the guard on a Connect user's SQL
    key = "spark.sql.catalog.lake.storage.aws_access_key_id"
    for q in ("SET spark.sql.catalog.evil=org.apache.spark.sql.execution.datasources.v2.jdbc.JDBCTableCatalog",
              f"CREATE TEMPORARY VIEW j USING jdbc OPTIONS (url 'jdbc:derby:{shared['workdir'] / 'derby_connect'};"
              "create=true', dbtable 'SYS.SYSTABLES')",
              f"SELECT reflect('java.lang.System', 'getProperty', '{key}') AS v",
              f"SELECT '${{system:{key}}}' AS v"):
        with pytest.raises(Exception, match="SharedServerGuard") as refused:
            work["alice"].sql(q).collect()
        assert KEY_ID not in str(refused.value)
    assert not (shared["workdir"] / "derby_connect").exists()
    answers: dict[str, list] = {me: [] for me in USERS}
    mine: dict[str, list] = {me: [] for me in USERS}

    def calls(me: str, column: str) -> None:
        try:
            answers[me].append(work[me].sql(f"CALL lance.compact(table => 'db.race_connect', sort_order => '{column}')")
                               .collect()[0]["strategy"])
        except Exception as e:  # noqa: BLE001 - what the user saw is the assertion's subject
            answers[me].append(f"failed: {e}"[:400])

    def attacks(me: str) -> None:
        def slow() -> None:
            try:
                # short: a stage Spark submits just after the interrupt runs to its end (docs/shared-servers.md)
                attack[me].sql(f"SELECT count(*) FROM range(0, {SLOW_CONNECT_ROWS}, 1, 2)").collect()
                mine[me].append("finished")
            except Exception as e:  # noqa: BLE001
                mine[me].append(str(e)[:200])
        while any(t.is_alive() for t in workers) and len(mine[me]) < 4:
            own = threading.Thread(target=slow)
            own.start()
            time.sleep(0.5)
            attack[me].interruptTag("nightly")
            attack[me].interruptAll()
            attack[me].interruptOperation(str(uuid.uuid4()))
            own.join(60)

    started = time.monotonic()
    workers = [threading.Thread(target=calls, args=("alice", "k")), threading.Thread(target=calls, args=("bob", "id"))]
    attackers = [threading.Thread(target=attacks, args=(me,)) for me in USERS]
    for t in workers + attackers:
        t.start()
    for t in workers + attackers:
        t.join(600)
    print(f"two Connect users: {time.monotonic() - started:.1f} s")
    assert answers == {"alice": ["clustering"], "bob": ["clustering"]}, answers
    for me, other in (USERS, USERS[::-1]):
        assert any("OPERATION_CANCELED" in m for m in mine[me]), mine  # one finished before its interrupt: no matter
        s = work[me]
        assert s.conf.get(f"{other}.private", "<unset>") == "<unset>"
        assert s.conf.get(f"{me}.private") == f"{me}-private-value"
        assert s.conf.get("spark.sql.shuffle.partitions") == ("3" if me == "alice" else "5")
        with pytest.raises(Exception, match="TABLE_OR_VIEW_NOT_FOUND"):
            s.sql(f"SELECT * FROM {other}_view").collect()
        assert s.sql(f"SELECT s FROM {me}_view").collect()[0]["s"] == f"{me}-private-view"
    with pytest.raises(Exception, match="SharedServerGuard"):
        work["bob"].sql("SELECT 'bob' AS s").createOrReplaceGlobalTempView("shared_view")
    # a program's spark.conf.set of a catalog: every statement of that session refused, not the other's
    work["alice"].conf.set("spark.sql.catalog.lake", "org.apache.spark.sql.execution.datasources.v2.jdbc.JDBCTableCatalog")
    try:
        with pytest.raises(Exception, match="SharedServerGuard"):
            work["alice"].sql("SELECT count(*) FROM lake.db.t").collect()
        assert work["bob"].sql("SELECT count(*) AS n FROM lake.db.t").collect()[0]["n"] > 0
    finally:
        work["alice"].sql("RESET spark.sql.catalog.lake").collect()
    assert work["alice"].sql("SELECT count(*) AS n FROM lake.db.t").collect()[0]["n"] > 0
    assert _content(path) == before

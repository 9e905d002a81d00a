"""SharedServerGuard as an allowlist (issue 41): under the guard a session gets the data sources,
functions and commands the operator allowed, and every other one is refused by name before it
runs, with the setting that allows it. Here, a PySpark session the operator configured with the
guard and two allowances (the csv source, the try_reflect function): every function and data
source the running Spark registers is shown either allowed by name or refused; commands and
operations that open a connection, a path, a class or a jar are refused; what a SQL user does
with the operator's catalogs still works (the product's statements and Python API included).
The same guard on a Thrift server shared by two users: tests/test_untrusted_sql.py."""
from __future__ import annotations

import os

import lance
import pytest

from conftest import lance_session
from oracle import degraded_table

GUARD = "io.github.lancecompact.spark.SharedServerGuard"
ALLOW_SOURCES = "spark.lance.compact.guard.allowSources"
ALLOW_FUNCTIONS = "spark.lance.compact.guard.allowFunctions"
ALLOW_COMMANDS = "spark.lance.compact.guard.allowCommands"
# Spark's built-ins that open a class, a path or other statements' logs: refused unless allowed
DANGEROUS = {"reflect", "java_method", "try_reflect", "from_avro", "to_avro", "schema_of_avro",
             "from_protobuf", "to_protobuf", "python_worker_logs"}


@pytest.fixture(scope="module")
def spark(warehouse):
    degraded_table(str(warehouse / "db" / "t.lance"), fragments=8, rows_per_fragment=20)
    session = lance_session("local[2]", "guard-allowlist", str(warehouse), {
        "spark.sql.extensions": GUARD, ALLOW_SOURCES: "csv", ALLOW_FUNCTIONS: "try_reflect",
        "spark.sql.shuffle.partitions": "2"})
    yield session
    jvm = session._jvm
    session.stop()
    # The JVM may serve later test modules: Spark's shared function registry as Spark made it,
    # and no guard in the system properties the next SparkContext reads.
    jvm.io.github.lancecompact.spark.SharedServerGuard.restoreFunctions()
    for key in ("spark.sql.extensions", ALLOW_SOURCES, ALLOW_FUNCTIONS, ALLOW_COMMANDS,
                # the guard turns Hive's substitution of a Thrift connection's settings off
                "hive.variable.substitute", "hive.conf.restricted.list"):
        jvm.java.lang.System.clearProperty(key)


def _error(run) -> str | None:
    """The first line of the error ``run()`` raised, None if it ran."""
    try:
        run()
    except Exception as e:  # noqa: BLE001 - the error's text is what is checked
        return str(e).splitlines()[0] if str(e) else type(e).__name__
    return None


def _refused(text: str | None) -> bool:
    return text is not None and "SharedServerGuard" in text


def _builtins(spark) -> tuple[list[str], list[str]]:
    """The scalar and table-valued functions Spark registers for every session of this JVM."""
    jvm = spark._jvm
    conv = jvm.scala.jdk.javaapi.CollectionConverters
    reg = jvm.org.apache.spark.sql.catalyst.analysis
    scalar = sorted({str(f.funcName()) for f in conv.asJava(reg.FunctionRegistry.builtin().listFunction())})
    table = sorted({str(f.funcName()) for f in conv.asJava(reg.TableFunctionRegistry.builtin().listFunction())})
    return scalar, table


def _allowlist() -> set[str]:
    from lance_compact.api import jar_path
    import zipfile
    with zipfile.ZipFile(jar_path()) as jar:
        text = jar.read("io/github/lancecompact/spark/guard/functions.txt").decode()
    return {line.strip().lower() for line in text.splitlines() if line.strip() and not line.startswith("#")}


def test_every_registered_function_is_allowed_by_name_or_refused(spark):
    """Each of the running Spark's built-in functions (about 560 scalar and 15 table-valued in
    4.2), called by name through the DataFrame API (scalar) or SQL (table-valued): one the
    reviewed list or the operator's setting names is resolved as Spark resolves it (an error, if
    any, is about its arguments); every other one is refused by the guard, naming the function
    and the setting that would allow it. A name a later Spark adds is refused until listed."""
    from pyspark.sql import functions as F

    scalar, table = _builtins(spark)
    allowed = _allowlist() | {"try_reflect"}
    outcomes = {}
    for name in scalar:
        outcomes[name] = _error(lambda: spark.range(1).select(F.call_function(name)).schema)
    for name in table:
        outcomes[name] = _error(lambda: spark.sql(f"SELECT * FROM {name}()").schema)
    refused = {n for n, e in outcomes.items() if _refused(e)}
    assert len(outcomes) >= 500
    assert refused == {n for n in outcomes if n.lower() not in allowed}, refused ^ {
        n for n in outcomes if n.lower() not in allowed}
    assert DANGEROUS - {"try_reflect"} <= refused
    for name in refused:
        assert f"the function {name} is refused" in outcomes[name] and f"{ALLOW_FUNCTIONS}={name}" in outcomes[name], \
            outcomes[name]
    # the JVM's own account of the refused names agrees with what resolution did
    listed = set(spark._jvm.io.github.lancecompact.spark.SharedServerGuard.refusedFunctions())
    assert listed == refused


def test_refused_functions_are_refused_in_every_spelling_and_allowed_ones_work(spark):
    key = "spark.lance.compact.guard.allowSources"
    for q in (f"SELECT reflect('java.lang.System', 'getProperty', '{key}')",
              f"SELECT JAVA_METHOD('java.lang.System', 'getProperty', '{key}')",
              f"SELECT `reflect`('java.lang.System', 'getenv', 'HOME')",
              f"SELECT system.builtin.reflect('java.lang.System', 'getProperty', '{key}')",
              f"SELECT * FROM (SELECT 1 AS a) WHERE a IN (SELECT length(java_method('java.lang.System', 'getenv', 'HOME')))",
              "SELECT to_protobuf(named_struct('a', 1), 'M', '/etc/passwd')",
              "SELECT * FROM python_worker_logs()",
              "SELECT * FROM PYTHON_WORKER_LOGS()"):
        assert _refused(_error(lambda: spark.sql(q).collect())), q
    # the view's query is the user's: refused when the view is made, not only when it is read
    assert _refused(_error(lambda: spark.sql(
        "CREATE OR REPLACE TEMPORARY VIEW leak AS SELECT reflect('java.lang.System', 'getenv', 'HOME') AS v")))
    # what the operator allowed runs; what it did not stays refused
    assert spark.sql("SELECT try_reflect('java.lang.Math', 'abs', -3) AS v").collect()[0]["v"] == "3"
    assert spark.sql("SELECT upper('ok') AS v, count(*) AS n FROM range(3)").collect()[0]["n"] == 3
    assert spark.sql("SELECT * FROM range(2)").count() == 2


def _sources(spark) -> dict[str, str]:
    """Every data source registered in this JVM (Spark's ServiceLoader registry): short name ->
    class name."""
    jvm = spark._jvm
    loader = jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
    iface = jvm.java.lang.Class.forName("org.apache.spark.sql.sources.DataSourceRegister", True, loader)
    it = jvm.java.util.ServiceLoader.load(iface, loader).iterator()
    out = {}
    while it.hasNext():
        source = it.next()
        out.setdefault(str(source.shortName()), str(source.getClass().getName()))
    return out


def test_every_registered_data_source_is_allowed_by_name_or_refused(spark, tmp_path):
    """Every data source the running Spark registers (19 in 4.2: file formats, hive, jdbc,
    socket, rate, console, noop, state stores...), plus a Python data source a session
    registers, named by short name and by class name in ``CREATE TEMPORARY VIEW ... USING`` and
    in ``CREATE TABLE ... USING`` of the session catalog: refused by the guard with the setting
    that allows it, except the one the operator allowed (csv, and text, through which Spark reads
    a csv file to infer its schema), which reads. Nothing is opened
    before the refusal: the Derby database of a refused jdbc view is never created."""
    from pyspark.sql.datasource import DataSource, DataSourceReader

    class Mine(DataSource):
        @classmethod
        def name(cls):
            return "mine"

        def schema(self):
            return "v string"

        def reader(self, schema):
            class R(DataSourceReader):
                def read(self, partition):
                    yield ("from a source a session registered",)
            return R()

    spark.dataSource.register(Mine)
    sources = _sources(spark)
    assert {"jdbc", "parquet", "csv", "text", "hive", "socket", "rate", "console"} <= set(sources)
    derby = tmp_path / "derby"
    data = tmp_path / "data.csv"
    data.write_text("a,b\n1,2\n")
    options = (f"OPTIONS (path '{data}', url 'jdbc:derby:{derby};create=true', dbtable 'SYS.SYSTABLES', "
               "host '127.0.0.1', port '9', rowsPerSecond '1')")
    names = sorted(set(sources) | set(sources.values()) | {"mine", "org.apache.spark.sql.jdbc"})
    for i, name in enumerate(names):
        view = _error(lambda: spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW v{i} USING `{name}` {options}"))
        table = _error(lambda: spark.sql(f"CREATE TABLE t{i} (a STRING) USING `{name}`"))
        # csv is allowed; text with it (Spark infers a csv file's schema by reading it as text)
        if name in ("csv", sources["csv"], "text", sources["text"]):
            assert view is None and table is None, (name, view, table)
            continue
        for what, error in (("view", view), ("table", table)):
            if what == "table" and name in ("hive", sources["hive"]) and "WITHOUT_HIVE_SUPPORT" in (error or ""):
                continue  # this session has no Hive support: Spark refuses first (the Thrift tests have it)
            assert _refused(error) and ALLOW_SOURCES in error, (name, what, error)
    assert spark.sql("SELECT count(*) AS n FROM v" + str(names.index("csv"))).collect()[0]["n"] == 2  # no header option
    assert not derby.exists()
    # a file read by the direct-query form: refused unless its format is allowed
    assert _refused(_error(lambda: spark.sql(f"SELECT * FROM json.`{data}`").collect()))
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"secret": ["operator's"]}), str(tmp_path / "p.parquet"))
    assert _refused(_error(lambda: spark.sql(f"SELECT * FROM parquet.`{tmp_path / 'p.parquet'}`").collect()))
    assert spark.sql(f"SELECT * FROM csv.`{data}`").count() == 2


def test_the_issues_jdbc_derby_attack_is_refused_before_anything_opens(spark, tmp_path):
    """Issue 41 item 1 as written: Derby through USING jdbc, a Java function bound by
    sessionInitStatement, then a query reading the operator's key. Refused at the first
    statement; no Derby folder."""
    derby = tmp_path / "any" / "path"
    url = f"jdbc:derby:{derby};create=true"
    init = ("CREATE FUNCTION GETPROP(K VARCHAR(200)) RETURNS VARCHAR(2000) LANGUAGE JAVA PARAMETER STYLE JAVA "
            "NO SQL EXTERNAL NAME 'java.lang.System.getProperty'")
    for statement in (
            f"CREATE TEMPORARY VIEW i USING jdbc OPTIONS (url '{url}', dbtable 'SYS.SYSTABLES', "
            f"sessionInitStatement \"{init}\")",
            f"CREATE TEMPORARY VIEW leak USING jdbc OPTIONS (url '{url}', query \"SELECT GETPROP("
            "'spark.sql.catalog.lance.storage.aws_secret_access_key') FROM SYSIBM.SYSDUMMY1\")",
            f"CREATE TABLE jd USING jdbc OPTIONS (url '{url}', dbtable 'SYS.SYSTABLES')",
            f"CREATE TABLE jd2 USING org.apache.spark.sql.execution.datasources.jdbc.JdbcRelationProvider "
            f"OPTIONS (url '{url}', dbtable 'SYS.SYSTABLES')"):
        error = _error(lambda: spark.sql(statement))
        assert _refused(error) and "jdbc" in error.lower(), (statement, error)
    assert not (tmp_path / "any").exists()


@pytest.mark.parametrize("statement, what", [
    ("ADD JAR {tmp}/x.jar", "AddJarsCommand"),
    ("ADD FILE {tmp}/x.txt", "AddFilesCommand"),
    ("ADD ARCHIVE {tmp}/x.zip", "AddArchivesCommand"),
    ("CREATE TEMPORARY FUNCTION f AS 'org.apache.hadoop.hive.ql.udf.generic.GenericUDFReflect'", "CreateFunctionCommand"),
    ("CREATE FUNCTION f2 AS 'x.Y' USING JAR '{tmp}/x.jar'", "CreateFunctionCommand"),
    ("CREATE TEMPORARY FUNCTION g() RETURNS INT RETURN 1", "CreateSQLFunctionCommand"),
    ("DROP TEMPORARY FUNCTION IF EXISTS f", "DropFunctionCommand"),
    ("INSERT OVERWRITE DIRECTORY '{tmp}/out' USING parquet SELECT 1 AS a", "InsertIntoDataSourceDirCommand"),
    ("SELECT TRANSFORM(id) USING 'cat' AS (x) FROM range(2)", "ScriptTransformation"),
    ("SELECT TRANSFORM(id) USING '/bin/sh -c id' FROM range(1)", "ScriptTransformation"),
    ("CREATE TABLE s3 (a INT)", "parquet"),
    ("CREATE TABLE s4 USING parquet AS SELECT 1 AS a", "parquet"),
    ("CREATE TABLE s5 (a INT) USING csv LOCATION '{tmp}/loc'", "LOCATION"),
    ("CREATE DATABASE d LOCATION '{tmp}/db'", "LOCATION"),
    ("CREATE GLOBAL TEMPORARY VIEW gv AS SELECT 1", "global temporary view"),
    ("SET spark.sql.catalog.evil=org.apache.spark.sql.execution.datasources.v2.jdbc.JDBCTableCatalog", "catalogs"),
    ("SET spark.sql.catalog.lance.warehouse={tmp}", "catalogs"),
    ("SET spark.lance.compact.guard.allowSources=jdbc", "static configuration"),
    ("SET spark.redaction.regex=none", "redaction"),
])
def test_commands_and_operations_not_allowed_are_refused_by_name(spark, tmp_path, statement, what):
    error = _error(lambda: spark.sql(statement.format(tmp=tmp_path)).collect())
    assert _refused(error) and what in error, error
    assert not any(tmp_path.iterdir())


def test_a_catalog_a_session_defines_is_refused(spark, tmp_path):
    """Spark builds a catalog from the session's settings on first use: a SQL SET of one is
    refused; a program's ``spark.conf.set`` (not SQL) reaches Spark's catalog manager, and any
    statement naming that catalog is refused."""
    degraded_table(str(tmp_path / "db" / "t.lance"), fragments=2, rows_per_fragment=5)
    before = lance.dataset(str(tmp_path / "db" / "t.lance")).version
    spark.conf.set("spark.sql.catalog.evil", "io.github.lancecompact.spark.catalog.LanceCatalog")
    spark.conf.set("spark.sql.catalog.evil.warehouse", str(tmp_path))
    try:
        for q in ("SHOW NAMESPACES IN evil", "SELECT * FROM evil.db.t", "CALL evil.compact(table => 'db.t')"):
            error = _error(lambda: spark.sql(q).collect())
            assert _refused(error) and "catalog evil" in error, (q, error)
        assert lance.dataset(str(tmp_path / "db" / "t.lance")).version == before
    finally:
        spark.conf.unset("spark.sql.catalog.evil")
        spark.conf.unset("spark.sql.catalog.evil.warehouse")


def test_python_and_jvm_functions_of_a_program_are_refused(spark):
    """A session's own functions run code on the server: a registered Python UDF by name (SQL
    and DataFrame), an inline one, mapInPandas/mapInArrow, a Python UDTF."""
    from pyspark.sql import functions as F
    from pyspark.sql.functions import udtf

    spark.udf.register("mine", lambda x: x, "bigint")
    inline = F.udf(lambda x: x, "bigint")

    @udtf(returnType="x: int")
    class One:
        def eval(self):
            yield (1,)

    spark.udtf.register("one", One)
    for run in (lambda: spark.sql("SELECT mine(id) FROM range(2)").collect(),
                lambda: spark.range(2).select(inline("id")).collect(),
                lambda: spark.range(2).mapInPandas(lambda it: it, "id long").collect(),
                lambda: spark.range(2).mapInArrow(lambda it: it, "id long").collect(),
                lambda: spark.sql("SELECT * FROM one()").collect()):
        assert _refused(_error(run))


def test_the_operators_catalogs_and_the_products_statements_work_under_the_guard(spark, warehouse):
    """What the guard leaves a SQL user: the operator's catalogs read and written, temporary
    views over them, settings, variables, caches, explain; every procedure, CREATE/DROP INDEX,
    table properties; the Python API."""
    from lance_compact import compact, describe_layout, table_health

    path = str(warehouse / "db" / "t.lance")
    rows = lance.dataset(path).count_rows()
    statements = [
        "SHOW NAMESPACES IN lance", "SHOW TABLES IN lance.db", "DESCRIBE TABLE lance.db.t",
        "CREATE OR REPLACE TEMPORARY VIEW mine AS SELECT * FROM lance.db.t WHERE id >= 0",
        "SET spark.sql.shuffle.partitions=2", "RESET spark.sql.shuffle.partitions",
        "DECLARE OR REPLACE VARIABLE lo BIGINT DEFAULT 0", "SELECT count(*) FROM mine WHERE id >= lo",
        "CACHE TABLE cached AS SELECT * FROM lance.db.t", "UNCACHE TABLE cached",
        "EXPLAIN SELECT * FROM lance.db.t", "SELECT * FROM lance.db.t.fragments",
        "SELECT * FROM lance.system.table_health",
        "CALL lance.plan_compaction(table => 'db.t')",
        "ALTER TABLE lance.db.t SET TBLPROPERTIES ('lance_compact.maintain.priority' = '3')",
        "CREATE INDEX id_idx ON lance.db.t USING BTREE (id)", "DROP INDEX id_idx ON lance.db.t",
        "SHOW FUNCTIONS", "DESCRIBE FUNCTION upper",
        # SQL scripting: a script's variables live in Spark's own `local` catalog
        "BEGIN DECLARE n BIGINT DEFAULT 0; SET n = (SELECT count(*) FROM lance.db.t); SELECT n; END",
        # substitution of the session's own settings and variables
        "SET hivevar:lo=0", "SELECT count(*) FROM lance.db.t WHERE id >= ${hivevar:lo}",
        "USE lance.db", "SHOW TABLES"]
    for statement in statements:
        assert _error(lambda: spark.sql(statement).collect()) is None, statement
    assert spark.sql("SELECT count(*) AS n FROM lance.db.t").collect()[0]["n"] == rows
    assert describe_layout(spark, "db.t").count() >= 1
    assert table_health(spark, "db.t").count() == 1
    compact(spark, "db.t")
    assert lance.dataset(path).count_rows() == rows and len(lance.dataset(path).get_fragments()) == 1
    assert os.path.isdir(path)


SECRET_PROPERTY = "lance.test.operator.k"  # a name Spark's redaction does not match
SECRET_VALUE = "op-s3cr3t-8f2e1d"


def test_substitution_reaches_neither_the_environment_nor_system_properties(spark):
    """Spark substitutes ``${env:X}`` and ``${system:X}`` in a statement's text (its variable
    substitution, on by default) with the server's environment variable or JVM system property,
    and spark-submit makes the driver's configuration system properties: ``SELECT
    '${system:spark.sql.catalog.lake.storage.aws_secret_access_key}'`` answered the operator's
    key to a beeline user, ``${env:AWS_SECRET_ACCESS_KEY}`` the environment's (attack pass, issue
    41). Refused before Spark parses, in every form found: in a view, EXECUTE IMMEDIATE or a
    script building the reference, a reference that substitution itself makes (``$${b}``), and a
    setting a program set to one; the session's own settings and variables still substitute."""
    jvm = spark._jvm
    jvm.java.lang.System.setProperty(SECRET_PROPERTY, SECRET_VALUE)  # as spark-submit makes a key one
    home = jvm.java.lang.System.getenv("HOME")
    try:
        outcomes = {}
        for q in (f"SELECT '${{system:{SECRET_PROPERTY}}}' AS v",
                  "SELECT '${env:HOME}' AS v",
                  f"SELECT * FROM lance.db.t WHERE payload = '${{system:{SECRET_PROPERTY}}}'",
                  f"CREATE OR REPLACE TEMPORARY VIEW leak AS SELECT '${{system:{SECRET_PROPERTY}}}' AS v",
                  f"EXECUTE IMMEDIATE 'SELECT ''$' || '{{system:{SECRET_PROPERTY}}}'' AS v'",
                  "BEGIN DECLARE s STRING DEFAULT 'SELECT ''$' || '{env:HOME}'' AS v'; EXECUTE IMMEDIATE s; END",
                  f"SET spark.lance.test.b={{system:{SECRET_PROPERTY}}}",  # no reference yet: it sets
                  "SELECT '$${spark.lance.test.b}' AS v",  # substituted: '${system:...}'
                  "SET spark.lance.test.a=$${spark.lance.test.b}"):
            try:
                outcomes[q] = ("ran", str(spark.sql(q).collect()))
            except Exception as e:  # noqa: BLE001 - the error's text is checked
                outcomes[q] = ("error", str(e).splitlines()[0])
        assert all(SECRET_VALUE not in text and f"'{home}'" not in text for _, text in outcomes.values()), outcomes
        ran = [q for q, (how, _) in outcomes.items() if how == "ran"]
        assert ran == [f"SET spark.lance.test.b={{system:{SECRET_PROPERTY}}}"], outcomes
        assert all(_refused(text) and "${system:" in text for how, text in outcomes.values() if how == "error"), outcomes
        # a setting a program (or a JDBC connection string) holds a reference in: every statement is
        # refused (SQLConf substitutes a setting's value when Spark reads it) until RESET
        spark.conf.set("spark.lance.test.zz", f"${{system:{SECRET_PROPERTY}}}")
        error = _error(lambda: spark.sql("SELECT 1").collect())
        assert _refused(error) and "spark.lance.test.zz" in error and "RESET" in error, error
        spark.sql("RESET spark.lance.test.zz")
        # the session's own settings and variables substitute as before
        spark.sql("SET spark.lance.test.mine=abc")
        assert spark.sql("SELECT '${spark.lance.test.mine}' AS v").collect()[0]["v"] == "abc"
        assert spark.sql("SELECT '${spark.lance.test.undefined}' AS v").collect()[0]["v"] == ""
        assert spark.sql("SELECT '${ENV:HOME}' AS v").collect()[0]["v"] == "${ENV:HOME}"  # not a prefix Spark knows
    finally:
        jvm.java.lang.System.clearProperty(SECRET_PROPERTY)
        for key in ("spark.lance.test.zz", "spark.lance.test.b", "spark.lance.test.mine"):
            spark.conf.unset(key)


def test_settings_a_session_may_not_set_are_refused_however_they_came(spark, tmp_path):
    """SET of a catalog's key or of redaction is refused, but settings also arrive without SET: a
    Thrift client's connection string (``jdbc:hive2://...;?spark.sql.catalog.lake=<Spark's JDBC
    catalog>;spark.sql.catalog.lake.url=jdbc:derby:<path>``) re-registered the operator's catalog
    as a Derby connection (a database made at the user's path, a SQL function bound to
    System.getProperty by its sessionInitStatement: the operator's key); ``;?spark.sql.legacy.
    setCommandRejectsSparkCoreConfs=false;spark.redaction.regex=x`` made ``SET <the key>`` answer
    it in clear (attack pass, issue 41; tests/test_untrusted_sql.py does it over JDBC). Here the
    same settings by ``spark.conf.set``: every statement is refused before anything resolves a
    catalog, naming the setting, until it is RESET; no Derby database is made."""
    derby = tmp_path / "derby"
    for attack in ({"spark.sql.catalog.lance": "org.apache.spark.sql.execution.datasources.v2.jdbc.JDBCTableCatalog",
                    "spark.sql.catalog.lance.url": f"jdbc:derby:{derby}", "spark.sql.catalog.lance.create": "true"},
                   {"spark.sql.catalog.lance.warehouse": str(tmp_path)},
                   {"spark.sql.legacy.setCommandRejectsSparkCoreConfs": "false", "spark.redaction.regex": "nothing"}):
        for key, value in attack.items():
            spark.conf.set(key, value)
        try:
            for q in ("SHOW NAMESPACES IN lance", "SELECT count(*) FROM lance.db.t",
                      "SET spark.sql.catalog.lance.storage.aws_secret_access_key", "SELECT 1"):
                error = _error(lambda: spark.sql(q).collect())
                assert _refused(error) and "set in this session" in error and "RESET" in error, (attack, q, error)
        finally:
            for key in reversed(attack):  # redaction before the setting that lets a session change it
                spark.sql(f"RESET {key}")
    assert not derby.exists()
    assert spark.sql("SELECT count(*) AS n FROM lance.db.t").collect()[0]["n"] > 0
    assert spark.sql("SET spark.sql.catalog.lance.storage.aws_secret_access_key").collect()[0]["value"] != "nothing"


def test_a_partition_cannot_be_placed_where_a_statement_says(spark, tmp_path):
    """``ALTER TABLE t ADD PARTITION (k=2) LOCATION '<folder>'`` was let through (the location rule
    looked at CREATE statements only): a table of the session catalog then read any folder as
    its partition, ``INSERT OVERWRITE`` of the partition emptied and wrote it, and ``DROP
    PARTITION ... PURGE`` removed it (attack pass, issue 41; any operator table of the session
    catalog would do, whatever its format). Refused now in every form; partitions in the table's
    own location still work."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.csv").write_text("victim,data\n")
    spark.sql("CREATE TABLE spark_catalog.default.parted (a STRING, k INT) USING csv PARTITIONED BY (k)")
    try:
        for q in (f"ALTER TABLE spark_catalog.default.parted ADD PARTITION (k=2) LOCATION '{victim}'",
                  "ALTER TABLE spark_catalog.default.parted ADD IF NOT EXISTS PARTITION (k=3) "
                  f"PARTITION (k=4) LOCATION 'file://{victim}'"):
            error = _error(lambda: spark.sql(q).collect())
            assert _refused(error) and "partition LOCATION" in error, (q, error)
        assert spark.sql("SHOW PARTITIONS spark_catalog.default.parted").count() == 0
        spark.sql("ALTER TABLE spark_catalog.default.parted ADD PARTITION (k=5)")
        spark.sql("INSERT INTO spark_catalog.default.parted PARTITION (k=6) VALUES ('mine')")
        assert [tuple(r) for r in spark.sql("SELECT * FROM spark_catalog.default.parted").collect()] == [("mine", 6)]
        assert os.listdir(victim) == ["keep.csv"]
    finally:
        spark.sql("DROP TABLE IF EXISTS spark_catalog.default.parted")


def test_an_xml_schema_cannot_be_fetched_or_read_by_a_function(spark, tmp_path):
    """``from_xml`` and ``schema_of_xml`` (allowed built-ins) take ``rowValidationXSDPath``: the
    driver fetched the schema from any URL or path, without a time-out (a listener that never
    answers held the statement), and parsed it with its external entities: a schema whose DTD
    names a file and an error path answered the file's text in the error (the operator's
    properties file, with its secret key: attack pass, issue 41). Options naming a path, URL or
    file are refused in every function, before anything is fetched; the others work."""
    import http.server
    import threading

    secret_file = tmp_path / "operator.properties"
    secret_file.write_text(f"spark.sql.catalog.lake.storage.aws_secret_access_key={SECRET_VALUE}\n")
    (tmp_path / "y.xsd").write_text(
        '<?xml version="1.0"?>\n<!DOCTYPE xs:schema [<!ENTITY % d SYSTEM "evil.dtd"> %d; %eval; %error;]>\n'
        '<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema"><xs:element name="a" type="xs:int"/></xs:schema>\n')
    (tmp_path / "evil.dtd").write_text(
        f'<!ENTITY % file SYSTEM "file://{secret_file}">\n'
        "<!ENTITY % eval \"<!ENTITY &#x25; error SYSTEM 'file:///nonexistent/%file;'>\">\n")
    requests = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(tmp_path), **kwargs)

        def log_message(self, fmt, *args):
            requests.append(self.path)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/y.xsd"
    try:
        for q in (f"SELECT from_xml('<a>1</a>', 'a INT', map('rowValidationXSDPath', '{url}'))",
                  f"SELECT from_xml(s, 'a INT', map('ROWVALIDATIONXSDPATH', '{url}')) FROM (SELECT '<a>1</a>' AS s)",
                  f"SELECT schema_of_xml('<a>1</a>', map('rowValidationXSDPath', '{tmp_path / 'y.xsd'}'))",
                  f"CREATE OR REPLACE TEMPORARY VIEW xsd AS SELECT from_xml('<a>1</a>', 'a INT', "
                  f"map('rowValidationXSDPath', '{url}')) AS x"):
            try:
                spark.sql(q).collect()
                error = None
            except Exception as e:  # noqa: BLE001 - every line of the error is checked
                error = str(e)
            assert error is not None and SECRET_VALUE not in error, (q, error)
            assert _refused(error.splitlines()[0]) and "rowValidationXSDPath" in error.splitlines()[0], (q, error)
        assert requests == []
        assert spark.sql("SELECT from_json('{\"a\":1}', 'a INT', map('mode', 'FAILFAST')) AS v").collect()[0]["v"]["a"] == 1
        assert spark.sql("SELECT to_xml(named_struct('a', 1), map('rowTag', 'r')) AS v").collect()[0]["v"].startswith("<r>")
    finally:
        server.shutdown()

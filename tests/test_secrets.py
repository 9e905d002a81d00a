"""Storage secrets stay out of sight: a CALL and a SELECT through lance-spark-sql against a
table on moto's real S3-compatible server, with planted credentials in its environment. While it
runs, every process's command line (ps and /proc/*/cmdline) is sampled; afterwards the engine
log, Spark's event log and the output are grepped. Neither the key nor the key id appears."""
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import lance
import pytest

from conftest import ROOT
from oracle import content, degraded_table
from s3_server import ACCESS_KEY_ID, SECRET_ACCESS_KEY

PLANTED = (ACCESS_KEY_ID, SECRET_ACCESS_KEY)


def command_lines() -> list[str]:
    """Every process's arguments, as ps shows them and as /proc holds them."""
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, timeout=30).stdout
    lines = ps.splitlines()
    for f in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            lines.append(Path(f).read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:  # the process ended meanwhile
            pass
    return lines


def test_no_secret_on_any_command_line_log_or_event_log(s3, tmp_path):
    bucket = s3.create_bucket(f"secrets-{os.getpid()}-{int(time.time() * 1000) % 10**9}")
    wh = f"{bucket}/wh"
    uri = f"{wh}/db/events.lance"
    # Credentials planted for this run only (moto takes any): every process on the machine
    # can be searched for them.
    token = uuid.uuid4().hex[:12].upper()
    planted = (f"AKIA{token}", f"planted-secret-{token.lower()}-Zq8")
    storage = {**s3.storage_options, "aws_access_key_id": planted[0], "aws_secret_access_key": planted[1]}
    degraded_table(uri, storage_options=storage, fragments=20, rows_per_fragment=30)
    before = lance.dataset(uri, storage_options=storage)
    events, engine_log = tmp_path / "events", tmp_path / "engine.log"
    events.mkdir()
    conf = {"spark.eventLog.enabled": "true", "spark.eventLog.dir": str(events),
                 "spark.eventLog.compress": "false", "spark.ui.enabled": "false",
            "spark.lance.compact.engine.log": str(engine_log)}
    private_dirs = set(glob.glob(os.path.join(tempfile.gettempdir(), "lance-compact-conf-*")))
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    args = [str(ROOT / "bin" / "lance-spark-sql"), "--warehouse", wh, "--master", "local[2]",
            *[a for k, v in conf.items() for a in ("--conf", f"{k}={v}")],
            "-e", "CALL lance.compact(table => 'db.events', target_rows_per_fragment => 300);\n"
                  "SELECT count(*), sum(id) FROM lance.db.events"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "PYSPARK_GATEWAY"))}
    # The storage options as the docs say: in lance-spark-sql's environment (a properties
    # file works the same), never as --conf on a command line.
    env.update({f"LANCE_STORAGE_{k.upper()}": v for k, v in storage.items()})
    with open(out, "w") as o, open(err, "w") as e:
        p = subprocess.Popen(args, stdout=o, stderr=e, stdin=subprocess.DEVNULL, cwd=tmp_path, env=env)
        samples, deadline = 0, time.monotonic() + 400
        try:
            while p.poll() is None:
                assert time.monotonic() < deadline, "lance-spark-sql did not finish in 400 s"
                lines = command_lines()
                leaks = [line[:300] for line in lines for s in planted if s in line]
                assert not leaks, leaks
                if any("SparkSQLCLIDriver" in line for line in lines):
                    samples += 1
                time.sleep(0.5)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)
    assert p.returncode == 0, err.read_text()[-3000:]
    assert samples >= 3  # sampled while the driver ran, several times

    # It really ran: compacted, then read through the distributed read path.
    after = lance.dataset(uri, storage_options=storage)
    assert after.version > before.version and content(after) == content(before)
    expected = before.to_table(columns=["id"])["id"].to_pylist()
    assert f"{len(expected)}\t{sum(expected)}" in out.read_text()

    texts = {"stdout": out.read_text(), "stderr": err.read_text(), "engine log": engine_log.read_text()}
    logs = [f for f in events.rglob("*") if f.is_file()]
    assert logs and engine_log.stat().st_size > 0
    for f in logs:
        texts[f"event log {f.name}"] = f.read_text(errors="replace")
    events_text = "".join(t for n, t in texts.items() if n.startswith("event log"))
    assert "SparkListenerApplicationEnd" in events_text and "aws_secret_access_key" in events_text
    # The SELECT went through the distributed read (the catalog's Python data source).
    assert re.search(r"BatchScan lance\.db\.events\[[^\]]*\] \(Python\)", events_text)
    found = [(name, s) for name, text in texts.items() for s in planted if s in text]
    assert not found, found
    # The private properties file is gone with spark-sql.
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "lance-compact-conf-*"))) == private_dirs


def test_secret_conf_settings_are_moved_off_the_command_line(tmp_path):
    """lance-spark-sql's spark-sql command: secret --conf settings, $LANCE_STORAGE_* and a
    user's properties file go to the private properties file, never to spark-sql's arguments."""
    from lance_compact.cli import command

    user = tmp_path / "user.properties"
    user.write_text("spark.sql.catalog.lance.storage.aws_region=us-east-1\n")
    args, env, secret, properties = command(
        ["--warehouse", "s3://b/wh", "--conf", f"spark.sql.catalog.lance.storage.aws_secret_access_key={SECRET_ACCESS_KEY}",
         f"--conf=spark.hadoop.fs.s3a.secret.key={SECRET_ACCESS_KEY}", "--properties-file", str(user),
         "--conf", "spark.ui.enabled=false", "-e", "SELECT 1"],
        environ={"PATH": os.environ["PATH"], "LANCE_STORAGE_AWS_ACCESS_KEY_ID": ACCESS_KEY_ID})
    assert not any(s in a for a in args for s in PLANTED)
    assert secret == {"spark.sql.catalog.lance.storage.aws_secret_access_key": SECRET_ACCESS_KEY,
                      "spark.hadoop.fs.s3a.secret.key": SECRET_ACCESS_KEY,
                      "spark.sql.catalog.lance.storage.aws_access_key_id": ACCESS_KEY_ID}
    assert properties == str(user) and "spark.ui.enabled=false" in args and args[-2:] == ["-e", "SELECT 1"]


def test_the_private_properties_file_is_for_this_user_only():
    from lance_compact.runtime.private_conf import write_properties

    path = write_properties({"spark.sql.catalog.lance.storage.aws_secret_access_key": "a=b\\c"}, keep=True)
    try:
        assert oct(path.stat().st_mode & 0o777) == "0o600" and oct(path.parent.stat().st_mode & 0o777) == "0o700"
        assert path.read_text() == "spark.sql.catalog.lance.storage.aws_secret_access_key=a=b\\\\c\n"
    finally:
        import shutil
        shutil.rmtree(path.parent)


def test_the_properties_file_spark_submit_reads_is_found_in_either_spelling(tmp_path):
    """$PYSPARK_SUBMIT_ARGS may name a properties file as two words or as one with '=': either
    is the file we merge into ours (spark-submit reads the last one named); an unreadable one
    is named in the error."""
    from lance_compact.runtime.private_conf import properties_text, take_properties_file

    assert take_properties_file(["--properties-file", "/a", "--conf", "x=1", "pyspark-shell"]) == \
        ("/a", ["--conf", "x=1", "pyspark-shell"])
    assert take_properties_file(["--properties-file=/a", "pyspark-shell"]) == ("/a", ["pyspark-shell"])
    assert take_properties_file(["--properties-file", "/a", "--properties-file=/b", "pyspark-shell"]) == \
        ("/b", ["pyspark-shell"])
    assert take_properties_file(["pyspark-shell"]) == (None, ["pyspark-shell"])
    with pytest.raises(ValueError, match=r"cannot read the properties file .*nope named in \$PYSPARK_SUBMIT_ARGS"):
        properties_text(str(tmp_path / "nope"), "$PYSPARK_SUBMIT_ARGS")


JAVA_PROPERTIES = """
import java.io.*; import java.nio.charset.StandardCharsets; import java.util.*;
public class ReadProperties { public static void main(String[] a) throws Exception {
  Properties p = new Properties();
  try (Reader r = new InputStreamReader(new FileInputStream(a[0]), StandardCharsets.UTF_8)) { p.load(r); }
  Map<String, String> m = new TreeMap<>();
  for (String k : p.stringPropertyNames()) m.put(k, p.getProperty(k));
  System.out.print(m);
}}
"""


def test_properties_are_read_as_java_reads_them_and_joined_files_never_run_together(tmp_path):
    """read_properties (the service keeps a properties file's jars) reads what Java's own
    Properties.load reads, continuation lines, escapes and separators included; and files
    joined into one private file (a user's, then ours) never run together: a last line ending in
    a backslash once swallowed the next file's first setting, a storage key into a JVM option
    that `ps` shows."""
    from lance_compact.runtime.private_conf import joined, read_properties, write_properties

    source = tmp_path / "ReadProperties.java"
    source.write_text(JAVA_PROPERTIES)
    texts = ["a=1\nb = 2\n c:3\nd 4\n# x=9\n! y=8\n\ne=five \\\n   six\nf=back\\\\\ng\\=h=i\n"
             "uni=\\u00e9t\\u00E9\nempty=\nonly\ntab\t=\tx\\ty\nlast=z\\",
             "k1=v\\\r\n  w\rk2=\\n2\n\n  \\\n", "spark.jars=/a.jar\\\n,/b.jar\nx=1\\\\\\\ny=2"]
    for text in texts:
        (tmp_path / "t.properties").write_text(text)
        java = subprocess.run(["java", str(source), str(tmp_path / "t.properties")], capture_output=True,
                              text=True, timeout=120, check=True).stdout
        ours = read_properties(text)
        assert java == "{" + ", ".join(f"{k}={v}" for k, v in sorted(ours.items())) + "}", (text, java, ours)
    for user in ("spark.driver.extraJavaOptions=-Dfoo=1\\", "spark.driver.extraJavaOptions=-Dfoo=1\\\n"):
        secret = {"spark.sql.catalog.lance.storage.aws_secret_access_key": "SECRETKEY"}
        path = write_properties(secret, prefix=joined(user, "spark.sql.catalog.lance.warehouse=/wh"))
        read = read_properties(path.read_text())
        assert read["spark.driver.extraJavaOptions"] == "-Dfoo=1", read
        assert read["spark.sql.catalog.lance.warehouse"] == "/wh" and read[next(iter(secret))] == "SECRETKEY"


PYSPARK = """
import glob, json, os, sys
from pathlib import Path
from pyspark.sql import SparkSession
from lance_compact import configure_spark_with_lance_compact

secret = os.environ["PLANTED_SECRET"]  # not in this script's own arguments
builder = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
spark = configure_spark_with_lance_compact(
    builder, warehouse=sys.argv[1], storage_options={"aws_secret_access_key": secret}).getOrCreate()
lines = []
for f in glob.glob("/proc/[0-9]*/cmdline"):
    try:
        lines.append(Path(f).read_bytes().replace(b"\\0", b" ").decode(errors="replace"))
    except OSError:
        pass
conf = spark.sparkContext.getConf().get("spark.sql.catalog.lance.storage.aws_secret_access_key")
java = [l for l in lines if "pyspark-shell" in l and "--properties-file" in l]
print("RESULT " + json.dumps({"leaks": [l[:200] for l in lines if secret in l], "conf": conf == secret,
                              "java": len(java)}))
spark.stop()
"""


def test_pyspark_sessions_get_storage_options_without_a_command_line(tmp_path):
    """configure_spark_with_lance_compact(storage_options=...) before PySpark starts its JVM:
    the JVM has them in its conf, no process shows them."""
    secret = f"planted-secret-{uuid.uuid4().hex}"
    env = {k: v for k, v in os.environ.items()
           if k != "PYSPARK_SUBMIT_ARGS" and not k.startswith("PYSPARK_GATEWAY")}
    private_dirs = set(glob.glob(os.path.join(tempfile.gettempdir(), "lance-compact-conf-*")))
    env["PLANTED_SECRET"] = secret
    p = subprocess.run([sys.executable, "-c", PYSPARK, str(tmp_path)], capture_output=True,
                       text=True, timeout=300, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr[-3000:]
    result = json.loads(p.stdout.split("RESULT ", 1)[1])
    assert result["leaks"] == [] and result["conf"] and result["java"] >= 1
    assert secret not in p.stdout + p.stderr
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "lance-compact-conf-*"))) == private_dirs


LOGGING = """
import logging, sys, threading
from lance_compact.runtime import secrets
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
secrets.install_log_redaction()
secrets.remember_operator({"aws_secret_access_key": sys.argv[1], "aws_access_key_id": sys.argv[2], "aws_region": "us-east-1"})
logging.getLogger("lance_compact.engine").info("opened with %s %s in us-east-1", sys.argv[1], sys.argv[2])
t = threading.Thread(target=lambda: 1 / 0 if sys.argv[1] else None, name="worker")
t.start(); t.join()
raise RuntimeError("failed: " + sys.argv[1])
"""


def test_every_engine_log_line_is_redacted():
    """The engine's log handler redacts every secret it has seen, in messages, tracebacks and
    uncaught exceptions of any thread."""
    secret, key_id = f"planted-{uuid.uuid4().hex}", f"AKIA{uuid.uuid4().hex[:12].upper()}"
    p = subprocess.run([sys.executable, "-c", LOGGING, secret, key_id], capture_output=True, text=True, timeout=60)
    assert "opened with *********(redacted) *********(redacted) in us-east-1" in p.stderr
    assert "ZeroDivisionError" in p.stderr and "RuntimeError: failed: *********(redacted)" in p.stderr
    assert secret not in p.stderr + p.stdout and key_id not in p.stderr + p.stdout


# Samples every process's command line on the machine: run alone (bin/test), so no other module's
# processes are sampled.
pytestmark = pytest.mark.serial

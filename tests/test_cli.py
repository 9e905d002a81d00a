"""The spark-sql CLI in its own process, with no Python driver: bin/lance-spark-sql."""
import shutil
import subprocess

import lance
import pytest

from conftest import ROOT
from oracle import content, degraded_table


def spark_sql(warehouse, *args):
    return subprocess.run(
        [str(ROOT / "bin" / "lance-spark-sql"), "--warehouse", str(warehouse), "--master", "local[2]",
         "--hiveconf", "hive.cli.print.header=true", *args],
        capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def cli_warehouse(tmp_path_factory):
    wh = tmp_path_factory.mktemp("cli-warehouse")
    for name in ["events", "clicks"]:
        degraded_table(str(wh / "db" / f"{name}.lance"))
    (wh / "other").mkdir()
    return wh


def rows_of(stdout, header_start="table\tstrategy"):
    """First result rows of every CALL whose header starts so, from spark-sql's output."""
    lines = stdout.strip().splitlines()
    out = []
    for i, line in enumerate(lines):
        if line.startswith(header_start + "\t"):
            header = line.split("\t")
            out.append(dict(zip(header, lines[i + 1].split("\t"))))
    return out


def test_catalog_and_call_from_spark_sql(cli_warehouse):
    wh = cli_warehouse
    events, clicks = wh / "db" / "events.lance", wh / "db" / "clicks.lance"
    before_events, before_clicks = lance.dataset(str(events)), lance.dataset(str(clicks))
    p = spark_sql(wh, "-e", ";\n".join([
        "SHOW NAMESPACES IN lance",
        "SHOW TABLES IN lance.db",
        "SHOW PROCEDURES IN lance",
        "CALL lance.compact(table => 'db.events', target_rows_per_fragment => 1048576)",
        "CALL lance.compact(table => 'db.events')",
        "CALL lance.system.compact('db.clicks', 300)",
        "CALL lance.plan_compaction(table => 'db.clicks', target_rows_per_fragment => 5000)",
        "CALL lance.describe_layout(table => 'db.clicks')",
    ]))
    assert p.returncode == 0, p.stderr[-3000:]
    out = p.stdout
    assert "namespace\ndb\nother\n" in out
    assert "tableName\tisTemporary\nclicks\nevents\n" in out
    assert "procedure_name\n" + "".join(f"lance\t[]\tNULL\t{p}\n" for p in (
        "cleanup", "compact", "create_index", "describe_layout", "drop_index", "maintain", "maintain_warehouse",
        "optimize_indices", "plan_compaction")) in out
    results = rows_of(out)
    assert [r["table"] for r in results] == ["db.events", "db.events", "db.clicks"]
    first, noop, positional = results

    after_events, after_clicks = lance.dataset(str(events)), lance.dataset(str(clicks))
    assert int(first["read_version"]) == before_events.version
    assert int(first["new_version"]) == after_events.version > before_events.version
    assert int(first["fragments_removed"]) == len(before_events.get_fragments())
    assert int(first["fragments_added"]) == len(after_events.get_fragments()) == 1
    assert noop["tasks"] == "0" and noop["new_version"] == noop["read_version"] == first["new_version"]
    assert int(positional["tasks"]) >= 1 and int(positional["new_version"]) == after_clicks.version
    assert content(after_events) == content(before_events)
    assert content(after_clicks) == content(before_clicks)
    planned = rows_of(out, "task_id")
    assert planned and planned[0]["selected"] == "true" and planned[0]["read_version"] == str(after_clicks.version)
    described = rows_of(out, "table\tversion")
    assert described and described[0]["fragments"] == str(len(after_clicks.get_fragments()))


def test_spark_sql_reports_a_bad_option_and_changes_nothing(cli_warehouse):
    wh = cli_warehouse
    path = wh / "db" / "bad.lance"
    shutil.rmtree(path, ignore_errors=True)
    degraded_table(str(path))
    version = lance.dataset(str(path)).version
    p = spark_sql(wh, "-e", "CALL lance.compact(table => 'db.bad', options => map('colour', 'blue'))")
    assert p.returncode != 0
    assert "table db.bad: unknown options map key 'colour'; valid options are:" in p.stderr
    assert "\tat io.github" not in p.stderr  # the message, not a stack trace
    assert lance.dataset(str(path)).version == version


def test_a_scheduler_sees_a_failed_table_with_fail_on_error(cli_warehouse):
    """What an Airflow BashOperator runs: `lance-spark-sql -e "CALL lance.maintain_warehouse(...,
    fail_on_error => true)"` over a namespace with a broken table exits non-zero, naming it and
    why, after maintaining the other table; without fail_on_error it exits 0 with the failed
    table's row."""
    wh = cli_warehouse
    good = wh / "sched" / "good.lance"
    degraded_table(str(good))
    broken = wh / "sched" / "broken.lance" / "_versions"
    broken.mkdir(parents=True)
    (broken / "1.manifest").write_bytes(b"not a manifest")
    version = lance.dataset(str(good)).version
    call = "CALL lance.maintain_warehouse(namespace => 'sched', target_rows_per_fragment => 300{})"
    p = spark_sql(wh, "-e", call.format(", fail_on_error => true"))
    assert p.returncode != 0, p.stdout[-2000:]
    after = lance.dataset(str(good)).version
    assert after > version
    assert ("[LANCE_MAINTENANCE_FAILED] maintain_warehouse of namespace sched (catalog lance): 1 of 2 tables "
            "failed") in p.stderr, p.stderr[-3000:]
    assert "sched.broken: the table could not be evaluated" in p.stderr
    assert f"sched.good: compact (version {after})" in p.stderr and "\tat io.github" not in p.stderr
    p = spark_sql(wh, "-e", call.format(""))
    assert p.returncode == 0, p.stderr[-3000:]
    lines = p.stdout.strip().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("table\tstep\t"))
    rows = {r["table"]: r for r in (dict(zip(lines[start].split("\t"), line.split("\t")))
                                    for line in lines[start + 1:])}
    assert rows["sched.broken"]["error"].startswith("table sched.broken: cannot open")
    assert rows["sched.good"]["reason"].startswith("skipped: healthy")


def test_sql_examples_parse_and_run(cli_warehouse, tmp_path):
    """The sql/ examples as shipped, one after another against a warehouse holding db.events,
    in one spark-sql process (`-f` of the files joined: each process start costs seconds)."""
    wh = tmp_path / "wh"
    degraded_table(str(wh / "db" / "events.lance"))
    script = tmp_path / "examples.sql"
    script.write_text("".join((ROOT / "sql" / name).read_text() for name in (
        "compact.sql", "maintenance.sql", "streaming_maintenance.sql", "layout_and_plan.sql")))
    p = spark_sql(wh, "-f", str(script))
    assert p.returncode == 0, p.stderr[-3000:]
    compacted = rows_of(p.stdout)
    assert [r["table"] for r in compacted[:2]] == ["db.events", "db.events"]  # compact.sql, maintenance.sql
    assert [r["strategy"] for r in compacted[2:]] == ["incremental", "deletion_only", "default"]
    assert rows_of(p.stdout, "table\tversion\tdry_run")[0]["dry_run"] == "true"


def test_arguments_not_ours_pass_to_spark_sql_in_order():
    """lance-spark-sql takes --warehouse, --jars and --conf spark.jars= / spark.plugins= /
    spark.sql.extensions= (merged with its own) in either form; every other argument reaches spark-sql unchanged and in
    order, and a --conf value is never read as an option."""
    from lance_compact.cli import parse_args

    warehouse, jars, plugins, extensions, rest = parse_args(
        ["--master", "local[2]", "--warehouse", "/wh", "--conf", "spark.jars=a.jar", "-i", "init.sql",
         "--jars=b.jar", "-c", "spark.plugins=my.Plugin", "--conf=spark.ui.enabled=false",
         "--conf", "spark.sql.extensions=my.Extensions",
         "--new-spark-option", "v", "--conf", "--jars=not-ours", "-e", "SELECT 1"])
    assert (warehouse, jars, plugins, extensions) == ("/wh", "a.jar,b.jar", "my.Plugin", "my.Extensions")
    assert rest == ["--master", "local[2]", "-i", "init.sql", "--conf=spark.ui.enabled=false",
                    "--new-spark-option", "v", "--conf", "--jars=not-ours", "-e", "SELECT 1"]
    with pytest.raises(SystemExit, match="--warehouse needs a value"):
        parse_args(["--warehouse"])


def test_driver_java_options_are_merged_with_ours(tmp_path):
    """A user's --driver-java-options (in either form) join the command's own, once, instead
    of replacing them (spark-submit keeps only the last one given)."""
    from lance_compact.cli import DRIVER_JAVA_OPTIONS, command

    args, _, _, _ = command(["--warehouse", str(tmp_path), "--driver-java-options", "-XX:TieredStopAtLevel=1",
                             "--driver-java-options=-Dx=1", "-e", "SELECT 1"], environ={})
    assert args.count("--driver-java-options") == 1
    given = args[args.index("--driver-java-options") + 1]
    assert given == f"{DRIVER_JAVA_OPTIONS} -XX:TieredStopAtLevel=1 -Dx=1"
    assert not [a for a in args if a.startswith("--driver-java-options=")]
    assert args[-2:] == ["-e", "SELECT 1"]


def test_an_unreadable_properties_file_is_named_before_spark_starts(tmp_path):
    """The user's --properties-file is read as Spark reads one (private_conf.properties_text): a
    missing file or a folder is named in one line, exit 1, no traceback and no Spark."""
    for given in (tmp_path / "missing.properties", tmp_path):
        p = subprocess.run([str(ROOT / "bin" / "lance-spark-sql"), "--properties-file", str(given), "-e", "SELECT 1"],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 1 and p.stdout == "", p.stdout + p.stderr
        assert p.stderr.strip().splitlines() == [
            f"lance-spark-sql: cannot read the properties file {given} named in --properties-file: "
            + ("No such file or directory" if given.name == "missing.properties" else "Is a directory")], p.stderr


def test_a_short_run_exits_quietly(cli_warehouse):
    """issue 42: a short ``-e`` run ended while the job that starts the executors' Python workers
    (the pool's first worker starts it with the session) still ran, and the context's stop printed
    executor ERROR traces (a heartbeat meeting a stopped block manager). The JVM now waits for
    that job at exit (StartJobAtExit.scala): stderr holds no ERROR line and no trace."""
    p = spark_sql(cli_warehouse, "-e", "SELECT 1")
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.strip().splitlines()[-1] == "1", p.stdout
    noisy = [line for line in p.stderr.splitlines() if " ERROR " in line or "Exception" in line or "\tat " in line]
    assert noisy == [], p.stderr[-3000:]


def test_the_class_archive_is_made_once_then_mapped_and_its_log_never_reaches_stdout(cli_warehouse, tmp_path):
    """runtime/class_archive.py: the first run dumps the driver's class-data archive at its exit
    (into a private cache folder, by a name of its own, renamed when whole); the next run maps
    it. Both print the query's rows alone on stdout (HotSpot's cds lines go there: off)."""
    import os

    from conftest import without_test_class_archive

    env = {**without_test_class_archive(dict(os.environ)), "LANCE_COMPACT_CLASS_ARCHIVE": "true",
           "LANCE_COMPACT_CACHE_DIR": str(tmp_path)}

    def run():
        return subprocess.run([str(ROOT / "bin" / "lance-spark-sql"), "--warehouse", str(cli_warehouse),
                               "-e", "SELECT count(*) FROM lance.db.events"],
                              capture_output=True, text=True, timeout=600, env=env)

    rows = str(lance.dataset(str(cli_warehouse / "db" / "events.lance")).count_rows())
    first = run()
    assert first.returncode == 0 and first.stdout.strip() == rows, first.stdout + first.stderr[-2000:]
    folder = tmp_path / "class-archives"
    archives = list(folder.iterdir())
    assert len(archives) == 1 and archives[0].suffix == ".jsa", archives  # no .partial left
    assert oct(folder.stat().st_mode & 0o777) == "0o700" and archives[0].stat().st_mode & 0o077 == 0
    made = archives[0].stat().st_mtime_ns
    second = run()
    assert second.returncode == 0 and second.stdout.strip() == rows, second.stdout + second.stderr[-2000:]
    assert list(folder.iterdir()) == archives and archives[0].stat().st_mtime_ns >= made  # mapped, not made again


def test_a_class_archive_others_can_write_is_never_mapped(tmp_path):
    """The archive becomes the JVM's classes: from a folder or file another user could write
    (or a link), or under a folder others can write that is not sticky, none is used; nor when the user names an archive or -Xshare of their own."""
    import os
    from pathlib import Path

    from lance_compact.cli import command, with_class_archive
    from lance_compact.runtime import class_archive

    def java_options(env, argv=()):
        args, run_env, _, _ = command(["--warehouse", str(tmp_path), *argv, "-e", "SELECT 1"], environ=env)
        after = with_class_archive(args, run_env)
        return args[args.index("--driver-java-options") + 1], after

    from conftest import without_test_class_archive

    env = {**without_test_class_archive(dict(os.environ)), "LANCE_COMPACT_CLASS_ARCHIVE": "true",
           "LANCE_COMPACT_CACHE_DIR": str(tmp_path / "c")}
    whole = class_archive.MAGIC.to_bytes(4, "little")  # how a dynamic archive starts
    given, after = java_options(env)  # none made yet: this run dumps one, by a name of its own
    assert "-XX:ArchiveClassesAtExit=" in given and ".partial" in given and after is not None
    folder = class_archive.folder(env)
    partial = Path(given.split("-XX:ArchiveClassesAtExit=")[1].split()[0])
    assert partial.parent == folder
    digest = partial.name.split(".")[0]
    cut = folder / f"{digest}-100.jsa"  # made at 100 bytes, now 1: HotSpot would crash on it
    cut.write_bytes(b"x")
    cut.chmod(0o600)
    gone = folder / f"{digest}.999999999.partial"  # a run killed during its dump (no such pid)
    gone.write_bytes(b"x")
    given, _ = java_options(env)
    assert "SharedArchiveFile" not in given and not cut.exists()  # removed, dumped again
    assert not gone.exists()
    archive = folder / f"{digest}-4.jsa"
    archive.write_bytes(whole)
    archive.chmod(0o600)
    given, after = java_options(env)
    assert f"-XX:SharedArchiveFile={archive}" in given and class_archive.QUIET in given and after is None
    archive.chmod(0o620)  # writable by the group
    assert "Archive" not in java_options(env)[0]
    archive.chmod(0o600)
    folder.chmod(0o777)  # a folder anyone can write: the file could be swapped
    assert "Archive" not in java_options(env)[0]
    folder.chmod(0o700)
    archive.unlink()
    archive.symlink_to(tmp_path / "elsewhere.jsa")
    (tmp_path / "elsewhere.jsa").write_bytes(whole)
    assert "SharedArchiveFile" not in java_options(env)[0]
    archive.unlink()
    (tmp_path / "elsewhere.jsa").rename(archive)
    assert "SharedArchiveFile" not in java_options(env, ["--driver-java-options", "-Xshare:off"])[0]
    for name in ("SPARK_SUBMIT_OPTS", "JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS"):  # every JVM's options
        assert "Archive" not in java_options({**env, name: "-XX:SharedArchiveFile=/x/own.jsa"})[0], name
    assert "Archive" not in java_options({**env, "LANCE_COMPACT_CLASS_ARCHIVE": "false"})[0]
    assert "SharedArchiveFile" in java_options(env)[0]
    (tmp_path / "c").chmod(0o777)  # a folder above it that others can write, not sticky
    assert "Archive" not in java_options(env)[0]
    (tmp_path / "c").chmod(0o1777)  # sticky, as /tmp: nobody else may rename what is in it
    assert "SharedArchiveFile" in java_options(env)[0]


def test_a_class_archive_is_neither_dumped_nor_mapped_where_the_jvm_would_fail(tmp_path, monkeypatch):
    """HotSpot fails a JVM whose dump cannot be made (exit 1 after the statement, two lines on
    stdout; or no start at all), so none is tried: with a Java or JVMTI agent (the debugger),
    without compressed class pointers, on a JDK without its base archive, on a disk short of
    room, within a day of a dump that left no archive; a kept file that does not start as an
    archive (a JVM killed in its dump leaves zeros) is removed, and a dump that is not whole is
    not kept. With no absolute home there is no cache (never a folder named '~' here); the JVM
    gets the cache's resolved path (a link swapped after the check is not followed)."""
    import os
    from pathlib import Path

    from conftest import without_test_class_archive
    from lance_compact.cli import command, with_class_archive
    from lance_compact.runtime import class_archive

    def java_options(env, argv=()):
        args, run_env, _, _ = command(["--warehouse", str(tmp_path), *argv, "-e", "SELECT 1"], environ=env)
        after = with_class_archive(args, run_env)
        return args[args.index("--driver-java-options") + 1], after

    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(real)
    env = {**without_test_class_archive(dict(os.environ)), "LANCE_COMPACT_CLASS_ARCHIVE": "true",
           "LANCE_COMPACT_CACHE_DIR": str(tmp_path / "link")}
    for option in ("-javaagent:/x/agent.jar", "-agentlib:jdwp=transport=dt_socket,server=y",
                   "-XX:-UseCompressedClassPointers"):
        assert "Archive" not in java_options(env, ["--driver-java-options", option])[0], option
        assert "Archive" not in java_options({**env, "JAVA_TOOL_OPTIONS": option})[0], option
    jdk = tmp_path / "trimmed-jdk" / "bin"  # a JDK image without lib/server/classes.jsa
    jdk.mkdir(parents=True)
    (jdk / "java").write_text("#!/bin/sh\n")
    (jdk / "java").chmod(0o755)
    assert "Archive" not in java_options({**env, "JAVA_HOME": str(jdk.parent)})[0]
    monkeypatch.setattr(class_archive, "FREE_TO_DUMP", 1 << 62)
    assert "Archive" not in java_options(env)[0]  # no room for a dump
    monkeypatch.undo()

    given, keep = java_options(env)
    partial = Path(given.split("-XX:ArchiveClassesAtExit=")[1].split()[0])
    assert partial.parent == real / "class-archives"  # resolved: the link is not the JVM's to follow
    digest = partial.name.split(".")[0]
    partial.write_bytes(bytes(64))  # a dump cut off: the header never written
    keep()
    assert list(partial.parent.glob("*.jsa")) == [] and not partial.exists()
    assert "Archive" not in java_options(env)[0]  # not tried again within the day
    (partial.parent / f"{digest}.no-dump").unlink()
    zeros = partial.parent / f"{digest}-64.jsa"  # whole-sized, but zeros where the header is
    zeros.write_bytes(bytes(64))
    zeros.chmod(0o600)
    given, keep = java_options(env)
    assert "ArchiveClassesAtExit" in given and not zeros.exists()
    partial = Path(given.split("-XX:ArchiveClassesAtExit=")[1].split()[0])
    partial.write_bytes(class_archive.MAGIC.to_bytes(4, "little") + bytes(60))
    keep()
    assert [p.name for p in partial.parent.glob("*.jsa")] == [f"{digest}-64.jsa"]
    assert f"-XX:SharedArchiveFile={partial.parent / f'{digest}-64.jsa'}" in java_options(env)[0]

    monkeypatch.setattr(os.path, "expanduser", lambda p: p)  # no HOME, no passwd entry
    assert class_archive.folder({}) is None
    no_home = {k: v for k, v in env.items() if k not in ("LANCE_COMPACT_CACHE_DIR", "XDG_CACHE_HOME")}
    monkeypatch.chdir(tmp_path)
    assert "Archive" not in java_options(no_home)[0] and not (tmp_path / "~").exists()

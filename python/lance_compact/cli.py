"""``lance-spark-sql``: spark-sql with the lance catalog, from the installed pyspark.

    lance-spark-sql --warehouse DIR_OR_URI [spark-sql arguments...]
    lance-spark-sql --warehouse /data/wh -e "CALL lance.compact(table => 'db.events')"

``--warehouse`` (or ``$LANCE_WAREHOUSE``) is the catalog's warehouse. Every other argument
passes to spark-sql unchanged and in order (``--master``, ``--conf``, ``-e``, ``-f``, ...),
except these, which this command merges with its own settings: ``--jars``, ``--conf
spark.jars=...``, ``--conf spark.plugins=...``, ``--driver-java-options``, ``--properties-file``
and secret ``--conf`` settings (below). Ours are recognized as ``--name value`` or ``--name=value`` (``-c`` for
``--conf``); spark-sql's options are not listed here, so a value of one of them that is
literally one of these names would be read as ours (spark-submit's ``--option=value`` form
avoids that). Spark is the pyspark
package installed beside this one; the driver's engine and the executors run this Python.
The Spark settings are :func:`lance_compact.api.spark_conf`'s, the ones
``configure_spark_with_lance_compact`` gives a PySpark session. ``$LANCE_COMPACT_START_ENGINE=false``
starts the engine on the first statement that names the catalog instead of with the session.

No secret goes on a command line (``ps`` shows those to every user of the machine). Give
storage options in a ``--properties-file`` (``spark.sql.catalog.lance.storage.<key>=...``)
or as environment variables ``LANCE_STORAGE_<KEY>`` (``LANCE_STORAGE_AWS_SECRET_ACCESS_KEY``);
they reach spark-sql in a Spark properties file (mode 0600, in a private temporary folder,
merged with the user's), removed when spark-sql ends. Storage options and settings named like
a secret given as ``--conf`` are moved there too, so Spark's JVM never shows them (this
command's own arguments did: don't).
Pictures of ``describe_layout`` may be written in the current folder
(``spark.lance.compact.picture.dir``; another ``--conf`` of it takes precedence).
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable

from .api import spark_conf
from .runtime import class_archive
from .runtime.private_conf import is_sensitive, properties_text, write_properties

STORAGE_ENV_PREFIX = "LANCE_STORAGE_"
USAGE = "usage: lance-spark-sql [--warehouse DIR_OR_URI] [spark-sql arguments...]"

# spark-sql's own (Hive) metastore is not used by the lance catalog: keep it in memory rather
# than leave metastore_db/ and derby.log in the current folder. (Spark's in-memory catalog
# instead was measured slower for the first statement: spark-sql then makes the session's
# state inside it, where with Hive it does so before.)
METASTORE_CONF = {
    "spark.hadoop.javax.jdo.option.ConnectionURL": "jdbc:derby:memory:lance_compact_metastore;create=true",
}
DRIVER_JAVA_OPTIONS = "-Dderby.stream.error.file=/dev/null"

def spark_home() -> str:
    """The Spark of the installed pyspark package (found without importing pyspark)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("lance-spark-sql: pyspark is not installed in this Python")
    return str(Path(list(spec.submodule_search_locations)[0]))


def _ours(argv: list[str], names: tuple[str, ...]):
    """Walk ``argv`` in order, yielding ``(name, value, given)`` for an option in ``names``
    (``--name value`` or ``--name=value``; ``--conf``/``-c`` as ``"--conf"`` with its
    ``key=value``) and ``(None, None, [arg])`` for each other argument, which passes on as it is.
    A ``--conf`` always takes the next argument, so its value is never read as an option."""
    i = 0
    while i < len(argv):
        arg = argv[i]
        value = argv[i + 1] if i + 1 < len(argv) else None
        name, eq, inline = arg.partition("=")
        if name in names and eq:  # --name=value
            yield ("--conf" if name == "-c" else name), inline, [arg]
            i += 1
        elif arg in names and value is not None:  # --name value
            yield ("--conf" if arg == "-c" else arg), value, argv[i:i + 2]
            i += 2
        elif arg == "--warehouse" and arg in names:
            raise SystemExit(f"lance-spark-sql: --warehouse needs a value\n{USAGE}")
        else:
            yield None, None, [arg]
            i += 1


def parse_args(argv: list[str]) -> tuple[str | None, str | None, str | None, str | None, list[str]]:
    """(warehouse, jars, plugins, SQL extensions, the arguments for spark-sql). ``--jars``,
    ``--conf spark.jars=``, ``--conf spark.plugins=`` and ``--conf spark.sql.extensions=`` given
    by the user are merged with ours.
    Secret settings stay in the arguments here; :func:`command` moves them out."""
    warehouse = os.environ.get("LANCE_WAREHOUSE") or None
    jars: list[str] = []
    plugins: list[str] = []
    extensions: list[str] = []
    rest: list[str] = []
    for name, value, given in _ours(argv, ("--warehouse", "--jars", "--conf", "-c")):
        if name == "--warehouse":
            warehouse = value
        elif name == "--jars":
            jars.append(value)
        elif name == "--conf" and value.startswith(("spark.jars=", "spark.plugins=", "spark.sql.extensions=")):
            key, v = value.split("=", 1)
            {"spark.jars": jars, "spark.plugins": plugins, "spark.sql.extensions": extensions}[key].append(v)
        else:
            if given[0] in ("-h", "--help"):
                print(USAGE + "\n  --warehouse DIR_OR_URI  the lance catalog's warehouse "
                      "(default $LANCE_WAREHOUSE)\nspark-sql's own options:", file=sys.stderr)
            rest.extend(given)
    return warehouse, ",".join(jars) or None, ",".join(plugins) or None, ",".join(extensions) or None, rest


def _take_secrets(rest: list[str]) -> tuple[list[str], dict[str, str], str | None]:
    """``rest`` without its secret ``--conf`` settings and its ``--properties-file``; the
    secret settings; the user's properties file."""
    kept: list[str] = []
    secret: dict[str, str] = {}
    properties = None
    for name, value, given in _ours(rest, ("--conf", "-c", "--properties-file")):
        if name == "--conf" and "=" in value and is_sensitive(value.split("=", 1)[0]):
            key, v = value.split("=", 1)
            secret[key] = v
        elif name == "--properties-file":
            properties = value
        else:
            kept.extend(given)
    return kept, secret, properties


def _take_java_options(rest: list[str]) -> tuple[list[str], list[str]]:
    """``rest`` without its ``--driver-java-options``, and their values: merged with ours
    (spark-submit keeps only the last one given)."""
    kept: list[str] = []
    options: list[str] = []
    for name, value, given in _ours(rest, ("--driver-java-options",)):
        if name == "--driver-java-options":
            options.append(value)
        else:
            kept.extend(given)
    return kept, options


def command(argv: list[str], environ: dict[str, str] | None = None
            ) -> tuple[list[str], dict[str, str], dict[str, str], str | None]:
    """The spark-sql command line and its environment, the settings that must go into a
    properties file instead (secrets), and the user's own properties file (or None)."""
    env = dict(os.environ if environ is None else environ)
    warehouse, jars, plugins, extensions, rest = parse_args(argv)
    rest, secret, properties = _take_secrets(rest)
    rest, java_options = _take_java_options(rest)
    # $LANCE_STORAGE_<KEY>=value: storage option <key> of the lance catalog, kept off every
    # command line (another user may read ps, not this process's environment).
    for k, v in env.items():
        if k.startswith(STORAGE_ENV_PREFIX) and len(k) > len(STORAGE_ENV_PREFIX):
            secret.setdefault(f"spark.sql.catalog.lance.storage.{k[len(STORAGE_ENV_PREFIX):].lower()}", v)
    home = spark_home()
    python = sys.executable  # not resolved: a venv's python is a link out of the venv
    env["SPARK_HOME"] = home
    env["PYSPARK_PYTHON"] = python
    env["PYSPARK_DRIVER_PYTHON"] = python
    env["PATH"] = os.pathsep.join(p for p in [os.path.dirname(python), env.get("PATH")] if p)
    # Local mode talks to itself only.
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    start_engine = env.get("LANCE_COMPACT_START_ENGINE", "true").lower() != "false"
    conf = {**spark_conf(warehouse=warehouse, python=python, start_engine=start_engine,
                         jars=jars, plugins=plugins, extensions=extensions, picture_dir=os.getcwd()),
            **METASTORE_CONF}
    spark_sql = os.path.join(home, "bin", "spark-sql")
    args = [spark_sql, "--jars", conf.pop("spark.jars"),
            "--driver-java-options", " ".join([DRIVER_JAVA_OPTIONS, *java_options])]
    for k, v in conf.items():
        args += ["--conf", f"{k}={v}"]
    return args + rest, env, secret, properties


def _run(args: list[str], env: dict[str, str], secret: dict[str, str],
         properties: str | None) -> int:
    """Run spark-sql with the secret settings in a private properties file, removed after."""
    prefix = ""
    if properties:
        try:
            prefix = properties_text(properties, "--properties-file")
        except ValueError as e:
            raise SystemExit(f"lance-spark-sql: {e}") from None
    path = write_properties(secret, prefix=prefix, keep=True)
    # The user's own file replaces spark-defaults.conf, as spark-submit does; ours alone does not.
    extra = ["--properties-file", str(path)] + ([] if properties else ["--load-spark-defaults"])
    args = [args[0], *extra, *args[1:]]
    # The terminal's Ctrl-C reaches spark-sql itself; a kill of this process is passed on.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        child = subprocess.Popen(args, env=env)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, lambda s, _f: child.send_signal(s))
        return child.wait()
    finally:
        shutil.rmtree(path.parent, ignore_errors=True)


def with_class_archive(args: list[str], env: dict[str, str]) -> Callable[[], None] | None:
    """Add the driver's class-data archive to ``args`` (runtime/class_archive.py: mapped when
    one was made for this JVM and these jars, else dumped by this run at its exit); returns
    what to do once spark-sql has ended (keep the dumped archive), or None."""
    at = args.index("--driver-java-options") + 1
    extra, after = class_archive.options(env["SPARK_HOME"], args[at].split(), env)
    if extra:
        args[at] = " ".join([args[at], *extra])
    return after


def main(argv: list[str] | None = None) -> None:
    try:
        args, env, secret, properties = command(list(sys.argv[1:] if argv is None else argv))
    except FileNotFoundError as e:  # no jar
        raise SystemExit(f"lance-spark-sql: {e}")
    after = with_class_archive(args, env)
    if not secret and not properties and after is None:
        os.execve(args[0], args, env)
    try:
        code = _run(args, env, secret, properties)
    finally:
        if after is not None:
            after()
    raise SystemExit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    main()

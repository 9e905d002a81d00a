"""A class-data archive for the tests' JVMs (Java's dynamic AppCDS, as lance-spark-sql's own:
python/lance_compact/runtime/class_archive.py).

Every JVM spark-submit starts for the tests (the modules' PySpark drivers, spark-sql, the
Thrift and Connect servers) loads and verifies the same ~15,000 Spark classes; on two cores
that run three modules at once it is CPU the tests wait for. ``bin/test`` makes one archive
first (:func:`make`: a short real workload, ``class_archive_warmup.py``, whose JVM dumps the
classes it loaded at its exit), and ``conftest.py`` hands it to every JVM through
``SPARK_SUBMIT_OPTS`` (:func:`java_options`). It is kept under the checkout's ``.cache/tests``
by the digest of the JVM and Spark's jars; a JVM whose class path differs (another Spark, a
wheel's venv) runs without it, silently (HotSpot checks, its cds log is off).
``LANCE_COMPACT_TEST_CLASS_ARCHIVE=false`` turns it off.

    .venv/bin/python tests/class_archive_for_tests.py      # make it (bin/test does)
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SWITCH = "LANCE_COMPACT_TEST_CLASS_ARCHIVE"


def _environ() -> dict[str, str]:
    """class_archive's view: on, with the tests' own cache folder."""
    return {**os.environ, "LANCE_COMPACT_CLASS_ARCHIVE": "true", "LANCE_COMPACT_CACHE_DIR": str(ROOT / ".cache" / "tests"),
            "SPARK_SUBMIT_OPTS": "", "JAVA_TOOL_OPTIONS": "", "JDK_JAVA_OPTIONS": ""}


def _spark_home() -> str:
    import pyspark
    return os.environ.get("SPARK_HOME") or str(Path(pyspark.__file__).parent)


def java_options() -> list[str]:
    """The options that map the tests' archive, when one was made for this JVM and these jars
    (none otherwise, and nothing is dumped here: :func:`make` does)."""
    if os.environ.get(SWITCH, "true").lower() in ("false", "0", "off", "no"):
        return []
    from lance_compact.runtime import class_archive

    mapped, _ = class_archive.options(_spark_home(), [], _environ(), may_dump=False)
    return [o for option in mapped for o in option.split()]


def make(timeout: float = 600) -> str:
    """Make the archive if there is none for this JVM and these jars: the warm-up module's JVM
    dumps it at its exit, and it is kept when that JVM has ended (renamed into place whole)."""
    if os.environ.get(SWITCH, "true").lower() in ("false", "0", "off", "no"):
        return "off"
    if java_options():
        return "present"
    from lance_compact.runtime import class_archive

    env = _environ()
    dump, keep = class_archive.options(_spark_home(), [], env)
    if keep is None:
        return "not made (an unsafe cache folder, or no java)"
    partial = dump[0].split("=", 1)[1]
    # (its time is not a module's of the suite: LANCE_COMPACT_TEST_TIMES, a path relative to the
    # checkout, made the warm-up fail at its end from tests/)
    run_env = {**{k: v for k, v in os.environ.items() if k != "LANCE_COMPACT_TEST_TIMES"}, SWITCH: "false",
               "SPARK_SUBMIT_OPTS": " ".join(["-XX:TieredStopAtLevel=1", *dump])}
    started = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        str(ROOT / "tests" / "class_archive_warmup.py")],
                       cwd=ROOT / "tests", env=run_env, capture_output=True, text=True, timeout=timeout)
    # The driver JVM outlives pytest (PySpark's gateway ends when its stdin closes) and dumps
    # then: the archive is kept once no JVM writes it any more.
    deadline = time.monotonic() + 180
    while _writers(partial) and time.monotonic() < deadline:
        time.sleep(0.5)
    if _writers(partial):
        Path(partial).unlink(missing_ok=True)
        return "not made (the JVM did not end)"
    keep()
    outcome = "made" if java_options() else "not made"
    said = "" if p.returncode == 0 else ":\n" + (p.stdout[-3000:] + p.stderr[-2000:])
    return f"{outcome} in {time.monotonic() - started:.0f} s (warm-up rc {p.returncode}){said}"


def _writers(partial: str) -> bool:
    """Whether a process dumping to ``partial`` still runs."""
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if partial.encode() in (proc / "cmdline").read_bytes():
                    return True
            except OSError:
                pass
    return False


if __name__ == "__main__":
    print(f"the tests' class-data archive: {make()}")

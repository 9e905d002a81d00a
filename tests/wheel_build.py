"""The wheel the install tests use (tests/test_wheel.py, tests/test_wheel_platform.py), built
by bin/build-wheel once per test run however many modules and workers ask for it, and the
helpers those modules share for running a clean subprocess."""
from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
from pathlib import Path
from urllib.parse import urlparse

from conftest import ROOT

CONSTRAINTS = ROOT / "constraints.txt"
# Built wheels, one folder per test run; the lock makes the other workers wait for the first.
BUILT = ROOT / "target" / "test-wheel"


def run(args, timeout, **kw):
    """A subprocess with a bounded wait; its output comes back for the assertion messages."""
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, **kw)


def clean_env(path_first: Path | None = None, **extra: str) -> dict[str, str]:
    """This process's environment less anything pointing at the checkout, a venv or a Spark:
    no PYTHONPATH, LANCE_*, SPARK_*, PYSPARK_*, VIRTUAL_ENV; PATH without the checkout's
    folders (the machine's pip settings, PIP_*, stay, and so do the JVM flags of
    SPARK_SUBMIT_OPTS, which point at nothing: the tests' C1-only JIT, tests/conftest.py)."""
    drop = ("LANCE_", "SPARK_", "PYSPARK_", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "CONDA_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop) or k == "SPARK_SUBMIT_OPTS"}
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep)
            if p and not Path(p).resolve().is_relative_to(ROOT)]
    env["PATH"] = os.pathsep.join(([str(path_first)] if path_first else []) + path)
    env.update(extra)
    return env


def _run_key() -> str:
    """The same for every xdist worker of one run (its test-run id), else this process's."""
    return os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid-{os.getpid()}"


def built_wheel() -> Path:
    """bin/build-wheel's wheel for this run (its pip build fetches setuptools from the package
    index): built by the first caller, under a lock, and copied out of dist/ so that a later
    build-wheel cannot replace it under a test still installing it."""
    BUILT.mkdir(parents=True, exist_ok=True)
    with open(BUILT / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        mine = BUILT / _run_key()
        wheels = sorted(mine.glob("lance_spark_compact-*.whl"))
        if wheels:
            return wheels[0]
        for old in BUILT.iterdir():  # earlier runs' wheels (not one another run may be installing)
            if old.is_dir() and time.time() - old.stat().st_mtime > 6 * 3600:
                shutil.rmtree(old, ignore_errors=True)
        jar = ROOT / "spark-ext" / "target" / "lance-spark-compact.jar"
        before = jar.stat() if jar.is_file() else None
        p = run([ROOT / "bin" / "build-wheel"], timeout=900, stdin=subprocess.DEVNULL)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        # Other workers start Spark on that jar meanwhile: sbt package with nothing changed must
        # leave it alone (it once rewrote it, and a bin/lance-spark-sql test found no jar).
        if before is not None:
            after = jar.stat()
            assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns), \
                "bin/build-wheel's sbt package rewrote an up-to-date catalog jar"
        wheels = sorted((ROOT / "dist").glob("lance_spark_compact-*.whl"))
        assert len(wheels) == 1, wheels
        # The source checkout goes on using spark-ext/target: build-wheel leaves no copy behind.
        assert not (ROOT / "python" / "lance_compact" / "jars").exists()
        staging = BUILT / f".{mine.name}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        shutil.copy2(wheels[0], staging / wheels[0].name)
        staging.rename(mine)
        return mine / wheels[0].name


def local_path(path_or_uri: str) -> Path:
    """A local path given as a path or a file: URI."""
    return Path(urlparse(path_or_uri).path if path_or_uri.startswith("file:") else path_or_uri)

"""The package build puts the catalog jar into the package, so `pip install .` and
`pip install git+<url>` from a checkout give a package that works, never one that installs and
fails at first use for want of its jar.

Metadata is in pyproject.toml; this file only adds that step to setuptools' build_py:
- the jar is already in python/lance_compact/jars/ (bin/build-wheel, the release path, puts it
  there): it is packaged as it is;
- an editable install (bin/setup's `pip install -e`): nothing to do, the checkout's
  spark-ext/target/lance-spark-compact.jar is used;
- otherwise the jar is built with `bin/sbt package` (Java 17, and Maven the first time to fetch
  sbt's launcher) and copied into the build; what is missing is named before anything starts.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
JAR_NAME = "lance-spark-compact.jar"
HOW = ("Build the wheel with bin/build-wheel (after bin/setup) and pip install the wheel from "
       "dist/, or install a released wheel.")


class JarMissing(SystemExit):
    """The build stops: the jar cannot be built here (the message says why and what to do)."""


def java_major(java: str) -> int | None:
    """The major version `java -version` reports (17 for "17.0.9", 8 for "1.8.0_392")."""
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not m:
        return None
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major


def missing_tools(root: Path = ROOT, environ: dict[str, str] | None = None) -> list[str]:
    """What building the jar needs and this machine lacks, in words."""
    env = os.environ if environ is None else environ
    path = env.get("PATH", "")
    problems = []
    if not (root / "bin" / "sbt").exists() or not (root / "spark-ext").is_dir():
        problems.append(f"the Scala sources (bin/sbt, spark-ext/): {root} is not a full source checkout")
        return problems
    java = shutil.which("java", path=path)
    if java is None:
        problems.append("java (Java 17 or newer) is not on PATH")
    else:
        major = java_major(java)
        if major is None or major < 17:
            problems.append(f"java at {java} is version {major or 'unknown'}; Java 17 or newer is needed")
    version = re.search(r"^sbt\.version=(\S+)", (root / "project" / "build.properties").read_text(), re.M)
    launcher = root / ".tools" / f"sbt-launch-{version.group(1) if version else '?'}.jar"
    if not launcher.exists() and shutil.which("mvn", path=path) is None:
        problems.append("mvn (Maven, to fetch sbt's launcher jar the first time) is not on PATH")
    return problems


def build_jar(root: Path = ROOT) -> Path:
    """`bin/sbt package` in the checkout; the jar it made."""
    problems = missing_tools(root)
    if problems:
        raise JarMissing("lance-spark-compact: cannot build the catalog jar for this package: "
                         + "; ".join(problems) + ". " + HOW)
    print("lance-spark-compact: building the catalog jar with bin/sbt package (a few minutes the first time)")
    p = subprocess.run([str(root / "bin" / "sbt"), "package"], cwd=root, stdin=subprocess.DEVNULL,
                       capture_output=True, text=True)
    jar = root / "spark-ext" / "target" / JAR_NAME
    if p.returncode != 0 or not jar.is_file():
        tail = "\n".join((p.stdout + p.stderr).splitlines()[-40:])
        raise JarMissing(f"lance-spark-compact: bin/sbt package failed (exit {p.returncode}):\n{tail}\n{HOW}")
    return jar


class BuildPyWithJar(build_py):
    """setuptools' build_py, then the catalog jar into the built package."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "lance_compact" / "jars" / JAR_NAME
        if target.is_file():  # packaged from python/lance_compact/jars/ (bin/build-wheel)
            return
        jar = build_jar()
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(jar, target)


if __name__ == "__main__":  # as setuptools' build backend runs it (tests import the functions above)
    setup(cmdclass={"build_py": BuildPyWithJar})

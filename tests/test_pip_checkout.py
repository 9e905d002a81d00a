"""`pip install <checkout>` (and so `pip install git+<url>`, which builds a clone the same way)
gives a package that carries its catalog jar, built by the package build (setup.py's build_py
step running bin/sbt package); and when the jar cannot be built, the build says what is missing
(java, Java 17, mvn, the Scala sources) and how to get a wheel instead."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT))
import setup as package_build  # noqa: E402  (setup.py: only calls setup() when run as the build)


def fake_checkout(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "sbt").write_text("#!/bin/sh\n")
    (root / "spark-ext").mkdir()
    (root / "project").mkdir()
    (root / "project" / "build.properties").write_text("sbt.version=1.10.7\n")
    return root


def test_build_names_every_missing_tool(tmp_path):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    problems = package_build.missing_tools(fake_checkout(tmp_path), {"PATH": str(empty)})
    assert problems == ["java (Java 17 or newer) is not on PATH",
                        "mvn (Maven, to fetch sbt's launcher jar the first time) is not on PATH"]


def test_build_refuses_a_java_older_than_17(tmp_path):
    tools = tmp_path / "old-java"
    tools.mkdir()
    java = tools / "java"
    java.write_text('#!/bin/sh\necho \'openjdk version "11.0.21" 2023-10-17\' >&2\n')
    java.chmod(0o755)
    mvn = tools / "mvn"
    mvn.write_text("#!/bin/sh\n")
    mvn.chmod(0o755)
    problems = package_build.missing_tools(fake_checkout(tmp_path), {"PATH": str(tools)})
    assert problems == [f"java at {java} is version 11; Java 17 or newer is needed"]


def test_build_outside_a_checkout_says_how_to_get_a_wheel(tmp_path):
    with pytest.raises(package_build.JarMissing) as e:
        package_build.build_jar(tmp_path)
    assert "is not a full source checkout" in str(e.value) and "bin/build-wheel" in str(e.value)


def test_this_machine_has_what_the_build_needs():
    assert package_build.missing_tools() == []


@pytest.mark.network
def test_pip_install_of_a_checkout_carries_the_jar(tmp_path):
    """A copy of the checkout's files as git sees them (what a clone holds: no .venv, no built
    jar, no .tools), pip-installed into a fresh venv; the installed package finds its own jar.
    pip's isolated build fetches setuptools from the package index (hence `network`)."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60, check=True).stdout.split("\0")
    checkout = tmp_path / "checkout"
    for name in filter(None, listed):
        src = ROOT / name
        if src.is_file():
            (checkout / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, checkout / name)
    assert not (checkout / "spark-ext" / "target").exists()

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    site = next((venv / "lib").glob("python*/site-packages"))
    # Dependencies (pyspark, pylance, ...) come from the project venv rather than the index:
    # only this package is installed here (--no-deps).
    ours = next(Path(p) for p in sys.path if p.endswith("site-packages") and Path(p).is_dir())
    (site / "project-deps.pth").write_text(str(ours) + "\n")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LANCE_", "PYTHONPATH", "VIRTUAL_ENV"))}
    p = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps",
                        "--disable-pip-version-check", str(checkout)],
                       capture_output=True, text=True, timeout=1500, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]

    p = subprocess.run([str(venv / "bin" / "python"), "-c",
                        "import lance_compact; print(lance_compact.__file__); print(lance_compact.jar_path())"],
                       capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    module, jar = p.stdout.split()
    assert Path(module).is_relative_to(site)
    assert Path(jar) == site / "lance_compact" / "jars" / "lance-spark-compact.jar"
    with zipfile.ZipFile(jar) as z:
        assert "io/github/lancecompact/spark/catalog/LanceCatalog.class" in z.namelist()
        assert "lance_compact/parameters.json" in z.namelist()

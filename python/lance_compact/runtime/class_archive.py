"""The driver JVM's class-data archive for ``lance-spark-sql`` (Java's dynamic AppCDS).

A fresh spark-sql process spends most of its first statement loading and verifying classes
(Spark's analyzer, the procedure's binding, the catalog). Java 13+ can dump the classes a run
loaded into an archive at exit (``-XX:ArchiveClassesAtExit``) and map it in later runs
(``-XX:SharedArchiveFile``): measured here, the first statement of a fresh process fell from
about 1.0 s to 0.5-0.6 s and the whole short run by 4-5 s (docs/benchmark.md).

* The first run without an archive dumps one at its exit (a few seconds more, once) to a name
  of its own, renamed into place when the JVM has ended, so runs side by side never read a
  half-written file; a run killed during its dump leaves a partial file, which the next
  dumping run removes. The kept name holds the file's size, and a file of another size is
  removed, not mapped: HotSpot trusts the header, and a truncated archive crashed the JVM at
  its start with SIGBUS (tried).
* The rest of the name is a digest of what the archive depends on (the ``java`` binary and
  every jar on Spark's class path, with their sizes and times): another Spark or JDK makes
  another archive (``--jars`` are not on that class path: a rebuilt jar needs none). The JVM
  checks the class path again itself and, on any mismatch, runs without the archive.
* The archive is mapped into the JVM as classes, so it is used only from a folder and a file
  owned by this user and writable by nobody else, under folders nobody else can swap (like
  ssh's keys); anything else is ignored.
* HotSpot fails a JVM whose dump fails (exit code 1 after the statement, two lines on
  standard output) or cannot be made (a Java or JVMTI agent, no compressed class pointers, a
  JDK without its base archive: the JVM does not start): none is dumped then, nor into a
  folder it cannot write or on a disk short of room, nor within a day of a dump that left no
  archive. A dump is kept only if it starts as an archive does (a JVM killed in its dump leaves
  zeros there) and is flushed to disk before it gets its name.
* HotSpot's ``cds`` log lines (a mismatch, a class it skips) go to standard output, which is
  spark-sql's result stream: they are switched off.
* An archive is about 180 MB; the three used last are kept (a rebuilt jar or another Spark
  makes a new one).
* ``LANCE_COMPACT_CLASS_ARCHIVE=false`` turns it off; so does an archive or ``-Xshare`` of the
  user's own, in ``--driver-java-options`` or in ``SPARK_SUBMIT_OPTS``, ``JAVA_TOOL_OPTIONS``
  or ``JDK_JAVA_OPTIONS``.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import stat
import time
from pathlib import Path
from typing import Callable, Mapping

ENV = "LANCE_COMPACT_CLASS_ARCHIVE"
CACHE_ENV = "LANCE_COMPACT_CACHE_DIR"
QUIET = "-Xlog:cds*=off -Xlog:class+path=off"
_USERS_OWN = ("SharedArchiveFile", "ArchiveClassesAtExit", "-Xshare")
_JAVA_ENV = ("SPARK_SUBMIT_OPTS", "JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS")  # options every JVM gets
# HotSpot refuses to start a dumping JVM with these (a Java agent or JVMTI agent such as the
# debugger: "Must enable AllowArchivingWithJavaAgent"; no compressed class pointers): the run
# would fail before its statement. With them no archive is dumped or mapped.
_CANNOT_DUMP = ("-javaagent", "-agentlib", "-agentpath", "-XX:-UseCompressedClassPointers",
                "-XX:-UseCompressedOops")
MAGIC = 0xF00BABA8  # HotSpot's dynamic archive header (CDS_DYNAMIC_ARCHIVE_MAGIC, little-endian)
FREE_TO_DUMP = 1 << 30  # a dump is about 180 MB; one that fills the disk fails the JVM (exit 1)
NO_DUMP_FOR_S = 24 * 3600  # after a dump that left no archive, the runs of a day do not try again


def folder(environ: Mapping[str, str]) -> Path | None:
    """Where archives are kept: ``$LANCE_COMPACT_CACHE_DIR``, else the user's cache folder;
    None when that is not an absolute path (no ``HOME`` and a uid without a passwd entry, as
    in containers run as an arbitrary uid: ``~`` would be a folder of the working directory)."""
    given = environ.get(CACHE_ENV)
    if given:
        where = Path(given) / "class-archives"
    else:
        base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        where = Path(base) / "lance-compact" / "class-archives"
    return where if where.is_absolute() else None


def _java(environ: Mapping[str, str]) -> str | None:
    """The ``java`` spark-class runs: ``$JAVA_HOME/bin/java``, else the first on the PATH."""
    home = environ.get("JAVA_HOME")
    found = os.path.join(home, "bin", "java") if home else shutil.which("java", path=environ.get("PATH"))
    return os.path.realpath(found) if found and os.path.exists(found) else None


def key(spark_home: str, java: str) -> str:
    """A digest of the JVM and Spark's jars (the driver's class path): the archive made by one
    is never offered to another. ``--jars`` (ours among them) are loaded by Spark's own class
    loader, whose classes a dynamic archive does not hold: a rebuilt jar needs no new one."""
    h = hashlib.sha256()
    spark_jars = Path(spark_home) / "jars"
    files = [java, *sorted(str(p) for p in spark_jars.glob("*.jar"))]
    for f in files:
        try:
            s = os.stat(f)
        except OSError:
            continue
        h.update(f"{f}\0{s.st_size}\0{s.st_mtime_ns}\n".encode())
    return h.hexdigest()[:32]


def _private(path: Path, is_dir: bool) -> bool:
    """Owned by this user, of the expected kind, and writable by nobody else."""
    try:
        s = os.lstat(path)
    except OSError:
        return False
    kind = stat.S_ISDIR(s.st_mode) if is_dir else stat.S_ISREG(s.st_mode)
    return kind and s.st_uid == os.geteuid() and not s.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _safe_parents(path: Path) -> bool:
    """No folder above ``path`` lets another user swap what is below it (as ssh checks a key's
    path): each belongs to this user or root, and one others may write is sticky (``/tmp``)."""
    for parent in Path(os.path.realpath(path)).parents:
        try:
            s = os.stat(parent)
        except OSError:
            return False
        if s.st_uid not in (0, os.geteuid()):
            return False
        if s.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not s.st_mode & stat.S_ISVTX:
            return False
    return True


def options(spark_home: str, java_options: list[str], environ: Mapping[str, str], may_dump: bool = True
            ) -> tuple[list[str], Callable[[], None] | None]:
    """The driver's Java options for the archive, and what to do after the JVM ended (rename
    a dumped archive into place), or None. No options when turned off or unsafe; with
    ``may_dump`` false, only the options that map an archive already made (the tests' JVMs)."""
    if environ.get(ENV, "true").lower() in ("false", "0", "off", "no"):
        return [], None
    # The user's own archive or -Xshare, given to spark-sql or to every JVM it starts through
    # the environment (two archives on one command line: HotSpot takes the last, or refuses).
    given = " ".join([*java_options, *(environ.get(k, "") for k in _JAVA_ENV)])
    if any(o in given for o in _USERS_OWN + _CANNOT_DUMP):
        return [], None
    java = _java(environ)
    if java is None or not (Path(java).parents[1] / "lib" / "server" / "classes.jsa").is_file():
        return [], None  # a JDK without its base archive (a trimmed image) cannot dump one on it
    named = folder(environ)
    if named is None:
        return [], None
    try:
        named.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:
        return [], None
    # The JVM gets the resolved path, checked here: a link on the way that is swapped after
    # the check (to another user's file) is never followed by the JVM.
    where = Path(os.path.realpath(named))
    if not _private(where, is_dir=True) or not _safe_parents(where):
        return [], None
    digest = key(spark_home, java)
    if any(c.isspace() for c in str(where)):
        return [], None  # spark-submit splits the driver's Java options at white space
    archive = _whole(where, digest)
    if archive is not None:
        if not _private(archive, is_dir=False):
            return [], None
        try:
            os.utime(archive)  # in use: the newest are the ones kept (_prune)
        except OSError:
            pass
        return [f"-XX:SharedArchiveFile={archive}", QUIET], None
    if not may_dump or not _may_dump(where, digest):
        return [], None
    _remove_abandoned(where)
    partial = where / f"{digest}.{os.getpid()}.partial"

    def keep() -> None:
        try:
            size = partial.stat().st_size if partial.exists() else 0
            if size > 0 and _magic_ok(partial):
                os.chmod(partial, 0o600)
                with open(partial, "rb") as f:  # on disk before it has its name: a power cut
                    os.fsync(f.fileno())        # must not leave a whole-sized file of zeros
                os.replace(partial, where / f"{digest}-{size}.jsa")
                _fsync_folder(where)
                _prune(where)
            else:  # the JVM was killed in its dump, or the dump failed: not again for a while
                (where / f"{digest}.no-dump").touch()
        except OSError:
            pass
        finally:
            try:
                partial.unlink(missing_ok=True)
            except OSError:
                pass

    return [f"-XX:ArchiveClassesAtExit={partial}", QUIET], keep


def _may_dump(where: Path, digest: str) -> bool:
    """Whether a run may dump an archive into ``where``: HotSpot ends a JVM whose dump fails
    with exit code 1 and two lines on standard output (spark-sql's result stream) after the
    statement ran, so a folder it cannot write, a disk short of room, or a dump that failed
    within the day (``<digest>.no-dump``) makes the run go without."""
    if not os.access(where, os.W_OK | os.X_OK):
        return False
    try:
        if shutil.disk_usage(where).free < FREE_TO_DUMP:
            return False
        failed = (where / f"{digest}.no-dump").stat().st_mtime
        return time.time() - failed > NO_DUMP_FOR_S
    except FileNotFoundError:
        return True
    except OSError:
        return False


def _magic_ok(path: Path) -> bool:
    """The file starts as a dynamic archive does (a JVM killed in its dump leaves zeros there)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return False
    return len(head) == 4 and int.from_bytes(head, "little") == MAGIC


def _fsync_folder(where: Path) -> None:
    fd = os.open(where, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _whole(where: Path, digest: str) -> Path | None:
    """The archive made for ``digest``, if it still has the size it was made with (its name
    says it). HotSpot maps the file and trusts its header: a shorter file (a full disk, a copy
    cut short) crashed the JVM with SIGBUS at its start (measured), so one is removed, not
    offered."""
    for archive in where.glob(f"{digest}-*.jsa"):
        made = archive.name[len(digest) + 1:-len(".jsa")]
        try:
            if made.isdigit() and archive.lstat().st_size == int(made) and _magic_ok(archive):
                return archive
            if _private(archive, is_dir=False):
                archive.unlink()
        except OSError:
            pass
    return None


def _remove_abandoned(where: Path) -> None:
    """Partial dumps of runs that are gone (killed before they could keep or remove theirs)."""
    for partial in where.glob("*.partial"):
        pid = partial.name.split(".")[-2]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            partial.unlink(missing_ok=True)
        except OSError:
            pass


KEEP = 3  # archives of other JVMs or jars (a rebuilt jar makes a new one): ~180 MB each


def _prune(where: Path) -> None:
    """Keep the :data:`KEEP` archives used last (a use touches its file); remove the rest."""
    archives = sorted(where.glob("*.jsa"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in archives[KEEP:]:
        old.unlink(missing_ok=True)

"""The guides' statements are tests (issue 43 item 3): every ```sql and ```python block of the
guides, and every ```bash/```sh block that is a `lance-spark-sql` (or `spark-sql`) invocation
with `-e "..."` or `-f file`, runs against a fixture warehouse holding the tables the blocks
name; a block that cannot run here says why in an HTML comment directly above it,
`<!-- not run: <reason> -->` (a real cloud account, a cluster URL, a package install). A block
that neither runs nor is marked fails. Blocks in other languages (text, properties, json,
scala) are not collected.

How each kind runs, in one Spark session for the module (conftest's ``spark``: its catalog
``lance`` over ``warehouse``):

- SQL: split into statements (quotes and comments respected), each ``spark.sql(...).collect()``.
- Shell: each command's ``-e`` text (or ``-f`` file, relative to the repository root) is run as
  SQL through the session; ``--warehouse`` and the catalog's warehouse setting must name the
  fixture's; ``export`` lines and a crontab schedule before the command are passed over.
- Python: ``exec`` in a namespace shared by the blocks of one file (a reader runs them in
  order), holding ``spark`` (the fixture session), the notebook's ``display``/``displayHTML``
  and, for the names a page's prose supplies (the reader's stream and write function:
  ``CONTEXT``), real objects. ``from pyspark.sql import SparkSession`` gives a stand-in whose
  builder records what the block sets on it (``configure_spark_with_lance_compact`` really
  runs on it) and whose ``getOrCreate()`` checks the catalog ``lance`` was configured over the
  fixture's warehouse, then returns the fixture session: every other call is the block's own.
  A streaming query a block starts is run to the end of its input and stopped after the block.

Substitutions (``SUBSTITUTIONS``): the docs' example warehouse path ``/data/wh`` is the
fixture's. Blocks run in file order; before each file's first block every fixture table is
restored to its fixture content (a Lance restore: a new version, so no cached manifest of an
earlier file's versions is read again). Files: the guides of issue 43, the landing page, the
failures and Lance tab pages (what a new user reads next) and any that exist of
warehouse-maintenance.md and recipes/*.md.

Also: a dry run fails where the real run would (issue 43: plan_compaction with a sort_order
succeeded where compact failed): every bad sort order is refused by plan_compaction with
compact's message, and every orderable kind of column plans and compacts."""
from __future__ import annotations

import builtins
import os
import re
import shlex
import shutil
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

from oracle import degraded_table

ROOT = Path(__file__).resolve().parents[1]
GUIDES = ["README.md", "docs/index.md", "docs/getting-started.md", "docs/coming-from.md", "docs/procedures.md",
          "docs/maintenance.md", "docs/clustering.md", "docs/catalogs.md", "docs/warehouse-maintenance.md",
          "docs/failures-and-cancellation.md", "docs/lance-tab.md"]
FILES = [f for f in GUIDES if (ROOT / f).exists()] + \
    sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs" / "recipes").glob("*.md"))
# The docs' example paths, as the fixture has them ({warehouse}: the fixture's warehouse).
SUBSTITUTIONS = {"/data/wh": "{warehouse}"}
LANGUAGES = {"sql": "sql", "python": "python", "py": "python", "bash": "shell", "sh": "shell",
             "shell": "shell", "console": "shell"}
MARKER = re.compile(r"^\s*<!--\s*not run\s*:(.*?)-->\s*$", re.I)
SQL_PROGRAMS = {"lance-spark-sql", "spark-sql"}


@dataclass(frozen=True)
class Block:
    file: str
    line: int          # the opening fence's line (1-based)
    kind: str          # sql, python, shell
    text: str
    marker: str | None  # the reason of a `not run` marker directly above, if any

    @property
    def id(self) -> str:
        return f"{self.file}:{self.line}"


def blocks_of(file: str) -> list[Block]:
    lines = (ROOT / file).read_text().splitlines()
    out, i = [], 0
    while i < len(lines):
        m = re.match(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)", lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.groups()
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            j += 1
        body = "\n".join(l[len(indent):] if l.startswith(indent) else l.lstrip() for l in lines[i + 1:j])
        marker = MARKER.match(lines[i - 1]) if i else None
        kind = LANGUAGES.get(lang.lower())
        if kind:
            out.append(Block(file, i + 1, kind, body, marker.group(1).strip() if marker else None))
        i = j + 1
    return out


BLOCKS = [b for f in FILES for b in blocks_of(f)]


# --- SQL and shell ---------------------------------------------------------------------------

def statements(sql: str) -> list[str]:
    """The statements of a SQL text: split on ';' outside quotes, comments dropped."""
    out, cur, quote, i = [], [], None, 0
    while i < len(sql):
        c = sql[i]
        if quote:
            cur.append(c)
            if c == "\\" and quote != "`" and i + 1 < len(sql):
                cur.append(sql[i + 1])
                i += 1
            elif c == quote:
                quote = None
        elif c in "'\"`":
            quote = c
            cur.append(c)
        elif sql.startswith("--", i):
            i = sql.find("\n", i)
            i = len(sql) if i < 0 else i
            continue
        elif sql.startswith("/*", i):
            i = sql.index("*/", i) + 2
            continue
        elif c == ";":
            out.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    out.append("".join(cur))
    return [s.strip() for s in out if s.strip()]


def shell_commands(text: str) -> list[list[str]]:
    """The block's commands as argument lists (continuations joined, quotes spanning lines kept
    together, comments dropped)."""
    out, acc = [], ""
    for line in text.splitlines():
        acc = f"{acc}\n{line}" if acc else line
        if acc.rstrip().endswith("\\"):
            acc = acc.rstrip()[:-1] + " "
            continue
        try:
            tokens = shlex.split(acc, comments=True)
        except ValueError:  # a quote still open: the command goes on
            continue
        if tokens:
            out.append(tokens)
        acc = ""
    assert not acc.strip(), f"unterminated command: {acc!r}"
    return out


def sql_of_shell(text: str) -> list[tuple[str, dict]] | None:
    """For each command, its SQL text and its settings (--warehouse, --conf), or None when some
    command of the block is not a (lance-)spark-sql invocation with -e or -f."""
    runs = []
    for tokens in shell_commands(text):
        if tokens[0] == "export":
            continue
        at = next((k for k, t in enumerate(tokens) if os.path.basename(t) in SQL_PROGRAMS), None)
        if at is None or not all(re.fullmatch(r"[\d*/,-]+", t) for t in tokens[:at]):  # a crontab schedule
            return None
        settings, sql, args = {}, None, tokens[at + 1:]
        k = 0
        while k < len(args):
            a = args[k]
            if a in (">", ">>", "2>", "2>>"):
                k += 2
                continue
            if re.fullmatch(r"\d?>&\d|\d?>>?\S+", a):
                k += 1
                continue
            if a == "-e":
                sql = args[k + 1]
            elif a == "-f":
                path = ROOT / args[k + 1]
                if not path.is_file():
                    return None
                sql = path.read_text()
            elif a == "--warehouse":
                settings["spark.sql.catalog.lance.warehouse"] = args[k + 1]
            elif a == "--conf":
                key, _, value = args[k + 1].partition("=")
                settings[key] = value
            k += 2 if a in ("-e", "-f", "--warehouse", "--conf", "--properties-file", "--jars",
                            "--master", "--hivevar") else 1
        if sql is None:
            return None
        runs.append((sql, settings))
    return runs or None


def runnable(block: Block) -> str | None:
    """Why the block cannot run as collected (None if it can)."""
    if block.kind == "shell" and sql_of_shell(block.text) is None:
        return "a shell block that is not `lance-spark-sql -e/-f` invocations"
    if block.kind == "python":
        try:
            compile(block.text, block.id, "exec")
        except SyntaxError as e:
            return f"not Python ({e.msg})"
    return None


# --- the fixture warehouse ---------------------------------------------------------------------

def events_rows(start: int, n: int, seed: int = 0) -> pa.Table:
    """db.events' rows: tenant, ts (the last two weeks, newest first), category, payload."""
    rng = np.random.default_rng(seed + start)
    ids = np.arange(start, start + n, dtype=np.int64)
    now = datetime.now(timezone.utc).replace(microsecond=0)
    return pa.table({
        "id": pa.array(ids),
        "tenant": pa.array([f"t{v}" for v in rng.integers(0, 12, n)]),
        "ts": pa.array([now - timedelta(minutes=int(i) * 7) for i in ids], pa.timestamp("us", tz="UTC")),
        "category": pa.array([f"cat-{i % 17}" for i in ids]),
        "payload": pa.array([f"event {i}" for i in ids]),
    })


def appended(uri: str, parts: list[pa.Table]) -> lance.LanceDataset:
    for k, t in enumerate(parts):
        lance.write_dataset(t, uri, mode="append" if k else "create", max_rows_per_file=40)
    return lance.dataset(uri)


def make_tables(warehouse: Path) -> dict[str, tuple[str, int]]:
    """The tables the blocks name, small and degraded (small fragments, deleted rows); returns
    name -> (location, fixture version)."""
    for ns in ("db", "demo", "events"):
        (warehouse / ns).mkdir(exist_ok=True)
    made = {}

    def add(name: str, ds: lance.LanceDataset) -> None:
        made[name] = (ds.uri, ds.version)

    ev = appended(str(warehouse / "db" / "events.lance"), [events_rows(i * 40, 40) for i in range(16)])
    ev.delete("id % 11 = 0 OR (id >= 120 AND id < 140)")
    add("db.events", lance.dataset(ev.uri))
    t = appended(str(warehouse / "db" / "t.lance"), [events_rows(i * 40, 40, seed=7) for i in range(6)])
    add("db.t", t)
    rng = np.random.default_rng(3)
    items = pa.table({"id": pa.array(np.arange(600, dtype=np.int64)),
                      "category": pa.array([f"c{i % 9}" for i in range(600)]),
                      "emb": pa.FixedSizeListArray.from_arrays(
                          pa.array(rng.standard_normal(600 * 32, dtype=np.float32)), 32)})
    add("db.items", lance.write_dataset(items, str(warehouse / "db" / "items.lance"), max_rows_per_file=200))
    add("db.archive", degraded_table(str(warehouse / "db" / "archive.lance"), fragments=6, rows_per_fragment=20))
    # demo.events: the demo's table, at version 22 before its compaction (procedures.md
    # compares with version 22): 20 appends and degraded_table's two deletes.
    add("demo.events", degraded_table(str(warehouse / "demo" / "events.lance"), fragments=20,
                                      rows_per_fragment=20, appends=20))
    assert made["demo.events"][1] == 22
    for name in ("archive", "clicks", "users"):
        add(f"events.{name}", degraded_table(str(warehouse / "events" / f"{name}.lance"), fragments=4,
                                             rows_per_fragment=20))
    return made


def restore(tables: dict[str, tuple[str, int]]) -> None:
    """Each table as the fixture made it, as a new version (Lance's restore)."""
    for uri, version in tables.values():
        if lance.dataset(uri).version != version:
            lance.dataset(uri, version=version).restore()


@pytest.fixture(scope="module")
def tables(spark, warehouse):
    return make_tables(warehouse)


# --- Python's stand-ins --------------------------------------------------------------------------

class _Builder:
    """``SparkSession.builder`` as a block uses it: records what is set on it; ``getOrCreate``
    checks the lance catalog is configured over the fixture's warehouse and returns the fixture
    session."""

    def __init__(self, spark, warehouse: Path):
        self._spark, self._warehouse, self._options = spark, warehouse, {}

    def config(self, key=None, value=None, conf=None, map=None):
        for k, v in ({key: value} if key is not None else dict(map or {})).items():
            self._options[k] = str(v)
        return self

    def master(self, master):
        return self.config("spark.master", master)

    def appName(self, name):
        return self.config("spark.app.name", name)

    def enableHiveSupport(self):
        return self

    def getOrCreate(self):
        from lance_compact.api import CATALOG_CLASS
        assert self._options.get("spark.sql.catalog.lance") == CATALOG_CLASS, self._options
        configured = self._options.get("spark.sql.catalog.lance.warehouse", "").removeprefix("file:")
        assert Path(configured).resolve() == self._warehouse.resolve(), \
            f"the block's session names warehouse {configured}, not the fixture's"
        return self._spark


class _SparkSessionStandIn:
    def __init__(self, spark, warehouse):
        self._spark, self._warehouse = spark, warehouse

    @property
    def builder(self):
        return _Builder(self._spark, self._warehouse)

    def getActiveSession(self):
        return self._spark

    active = getActiveSession


def importer(stand_in):
    """``__import__`` giving the stand-in for ``from pyspark.sql import SparkSession``."""
    real = builtins.__import__

    def imp(name, globals=None, locals=None, fromlist=(), level=0):
        module = real(name, globals, locals, fromlist, level)
        if name == "pyspark.sql" and fromlist and "SparkSession" in fromlist:
            class Proxy:
                def __getattr__(self, attr):
                    return getattr(module, attr)
            proxy = Proxy()
            proxy.SparkSession = stand_in
            return proxy
        return module
    return imp


def stream_of(spark, uri: str, folder: Path, start: int):
    """A streaming DataFrame of new rows in the table's schema (a file source with one file)."""
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(events_rows(start, 30), folder / "part-0.parquet")
    return spark.readStream.schema(spark.read.parquet(str(folder)).schema).parquet(str(folder))


def append_to(uri: str):
    def write(batch, batch_id):
        lance.write_dataset(batch.toArrow(), uri, mode="append")
    return write


# What a page's prose supplies to its Python blocks (the reader's own stream and write).
CONTEXT = {
    "docs/maintenance.md": lambda spark, tables, tmp: {
        "events": stream_of(spark, tables["db.events"][0], tmp / "events-stream", 100_000),
        "uri": tables["db.events"][0]},
    "docs/warehouse-maintenance.md": lambda spark, tables, tmp: {
        "stream": stream_of(spark, tables["events.clicks"][0], tmp / "clicks-stream", 200_000),
        "write": append_to(tables["db.events"][0])},
}


# --- the blocks ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def state():
    return {"file": None, "namespace": None}


def substituted(text: str, warehouse: Path) -> str:
    for k, v in SUBSTITUTIONS.items():
        text = text.replace(k, v.format(warehouse=warehouse))
    return text


def run_sql(spark, sql: str, where: str) -> None:
    for s in statements(sql):
        try:
            spark.sql(s).collect()
        except Exception as e:
            raise AssertionError(f"{where}: {s}\nfailed: {e}") from None


def finish_streams(spark) -> None:
    """Each streaming query a block started runs to the end of its input (its batches written
    and maintained by the block's own function), then stops."""
    for q in spark.streams.active:
        try:
            q.processAllAvailable()
            rows = sum(p["numInputRows"] for p in q.recentProgress)
        finally:
            q.stop()
        assert q.exception() is None, q.exception()
        assert rows > 0, "the block's query read nothing"


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_doc_block(block, spark, warehouse, tables, state, tmp_path_factory, monkeypatch):
    if block.marker is not None:
        assert len(block.marker.split()) >= 2, f"{block.id}: a `not run` marker must say why: {block.marker!r}"
        pytest.skip(f"not run: {block.marker}")
    why = runnable(block)
    assert why is None, f"{block.id} cannot run ({why}): make it run or mark it <!-- not run: <reason> -->"
    if state["file"] != block.file:
        restore(tables)
        stand_in = _SparkSessionStandIn(spark, warehouse)
        ns = {"__name__": "__doc__", "spark": spark, "SparkSession": stand_in,
              "__builtins__": {**vars(builtins), "__import__": importer(stand_in)},
              "display": lambda *a, **k: None, "displayHTML": lambda html: None}
        if block.file in CONTEXT:
            ns.update(CONTEXT[block.file](spark, tables, tmp_path_factory.mktemp("stream")))
        state.update(file=block.file, namespace=ns)
    text = substituted(block.text, warehouse)
    # Files the blocks write (a picture) go in the folder the session lets describe_layout draw in.
    monkeypatch.chdir(warehouse.parent)
    if block.kind == "sql":
        run_sql(spark, text, block.id)
    elif block.kind == "shell":
        for sql, settings in sql_of_shell(text):
            wh = settings.get("spark.sql.catalog.lance.warehouse")
            assert wh is None or Path(wh).resolve() == warehouse.resolve(), f"{block.id}: warehouse {wh}"
            run_sql(spark, sql, block.id)
    else:
        try:
            exec(compile("\n" * block.line + text, block.file, "exec"), state["namespace"])
        finally:
            finish_streams(spark)


def test_every_marker_is_directly_above_a_block():
    """A `not run` marker anywhere else marks nothing (and a block it meant to mark would run)."""
    stray = []
    for f in FILES:
        lines = (ROOT / f).read_text().splitlines()
        for k, line in enumerate(lines):
            if "not run" in line and "<!--" in line:
                assert MARKER.match(line), f"{f}:{k + 1}: malformed marker {line!r}"
                if k + 1 >= len(lines) or not re.match(r"^\s*(`{3,}|~{3,})", lines[k + 1]):
                    stray.append(f"{f}:{k + 1}")
    assert not stray, f"markers not directly above a fenced block: {stray}"


def test_the_guides_have_blocks_to_run():
    ran = [b for b in BLOCKS if b.marker is None]
    assert len(ran) >= 20 and {b.kind for b in ran} == {"sql", "python", "shell"}


# --- a dry run fails where the real run would ---------------------------------------------------

def kinds_table(n: int, start: int = 0) -> pa.Table:
    """One column of every kind of Arrow type a Lance table holds (some values null)."""
    import datetime as dt
    import decimal

    rng = np.random.default_rng(start)
    v = rng.integers(0, 50, n)
    null = rng.random(n) < 0.1
    masked = lambda arr: pa.array(arr, mask=null)  # noqa: E731
    return pa.table({
        "id": pa.array(np.arange(start, start + n, dtype=np.int64)),
        "b": masked(v % 2 == 0), "u8": pa.array(v.astype(np.uint8), mask=null),
        "f16": pa.array(v.astype(np.float16), mask=null), "f64": masked(v / 3.0),
        "s": masked([f"s{x:02}" for x in v]), "ls": pa.array([f"s{x}" for x in v], pa.large_string(), mask=null),
        "bin": pa.array([bytes([x]) for x in v], pa.binary(), mask=null),
        "lbin": pa.array([bytes([x, 1]) for x in v], pa.large_binary(), mask=null),
        "fsb": pa.array([bytes([x, 0, 0, 1]) for x in v], pa.binary(4), mask=null),
        "dec": pa.array([decimal.Decimal(int(x)) / 4 for x in v], pa.decimal128(10, 2), mask=null),
        "d": pa.array([dt.date(2024, 1, 1) + dt.timedelta(days=int(x)) for x in v], pa.date32(), mask=null),
        "t": pa.array([dt.time(int(x) % 24, int(x)) for x in v], pa.time64("us"), mask=null),
        "ts": pa.array([dt.datetime(2024, 1, 1) + dt.timedelta(hours=int(x)) for x in v],
                       pa.timestamp("us", tz="UTC"), mask=null),
        "dur": pa.array([dt.timedelta(seconds=int(x)) for x in v], pa.duration("us"), mask=null),
        "dict": pa.array([f"k{x % 5}" for x in v]).dictionary_encode(),
        "nul": pa.nulls(n),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(rng.standard_normal(n * 4, dtype=np.float32)), 4),
        "tags": pa.array([[f"t{x}"] for x in v]),
        "point": pa.array([{"x": int(x)} for x in v]),
        "m": pa.array([[("k", int(x))] for x in v], pa.map_(pa.string(), pa.int64())),
    })


ORDERABLE = ["b", "u8", "f16", "f64", "s", "ls", "bin", "lbin", "fsb", "dec", "d", "t", "ts", "dur"]


@pytest.fixture(scope="module")
def kinds(spark, warehouse):
    """kinds.<name>: a table of every kind of column, three fragments of 30 rows."""
    (warehouse / "kinds").mkdir(exist_ok=True)

    def make(name: str) -> str:
        uri = str(warehouse / "kinds" / f"{name}.lance")
        shutil.rmtree(uri, ignore_errors=True)
        for k in range(3):
            lance.write_dataset(kinds_table(30, k * 30), uri, mode="append" if k else "create")
        return f"kinds.{name}"
    return make


def outcome(spark, procedure: str, table: str, order: str):
    """(rows, None) or (None, the error's message as Spark gives it)."""
    try:
        return spark.sql(f"CALL lance.{procedure}(table => '{table}', target_rows_per_fragment => 1000, "
                         f"sort_order => '{order}')").collect(), None
    except Exception as e:
        return None, str(e)


def reason(message: str) -> str:
    """The product's own sentence in an error: from 'table <name>:' to the end of its line."""
    m = re.search(r"table kinds\.\w+: [^\n]*", message)
    assert m, message
    return m.group(0)


@pytest.mark.parametrize("order", [
    "nope", "S", "dict", "nul", "vec", "tags", "point", "m", "zorder(id, vec)", "hilbert(s, m)",
    "zorder(id, dict)", "s, nul DESC",
])
def test_a_dry_run_refuses_the_sort_order_compact_refuses(spark, warehouse, kinds, order):
    """A column that does not exist (or is misspelt by case) or cannot be ordered: plan_compaction
    fails with compact's own sentence, and neither writes."""
    table = kinds("refused")
    uri = str(warehouse / "kinds" / "refused.lance")
    version = lance.dataset(uri).version
    planned, plan_error = outcome(spark, "plan_compaction", table, order)
    ran, run_error = outcome(spark, "compact", table, order)
    assert run_error is not None, f"compact took sort_order {order!r}"
    assert plan_error is not None, f"plan_compaction took sort_order {order!r}, compact said: {reason(run_error)}"
    assert reason(plan_error) == reason(run_error)
    assert lance.dataset(uri).version == version


@pytest.mark.parametrize("column", ORDERABLE)
def test_what_a_dry_run_accepts_compacts(spark, kinds, column):
    """For every kind of column a sort order accepts, linearly and on both curves: the dry run
    plans and the run sorts and commits (the sort keys computed on real values, nulls too)."""
    for k, order in enumerate([f"{column} DESC NULLS FIRST, id", f"zorder({column}, id)", f"hilbert(id, {column})"]):
        table = kinds(f"{column}_{k}")
        planned, plan_error = outcome(spark, "plan_compaction", table, order)
        ran, run_error = outcome(spark, "compact", table, order)
        assert plan_error is None, f"plan_compaction refused {order!r}: {plan_error}"
        assert run_error is None, f"plan_compaction planned {order!r}; compact failed: {run_error}"
        assert planned and ran[0].rows_rewritten == 90, (order, planned, ran)

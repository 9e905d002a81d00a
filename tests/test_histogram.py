"""The layout histogram: a picture read at a glance and the same as text in a terminal.

Pictures are drawn with the real renderer (matplotlib's Agg, as in the PNG) and checked on
the drawn figure: no two text boxes (title, legend, caption, panel titles, axis and tick
labels, bar counts) overlap, every non-empty bucket is a bar a few pixels tall in each
panel, and the target line sits at the target. At 1 and 600 fragments through real tables
and CALL lance.describe_layout from spark.sql, at 100,000 through the FragmentHistogram API.
"""
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

import lance
import pytest

from oracle import batch, degraded_table
from lance_compact import FragmentHistogram, describe_layout
from lance_compact.report.histogram import PlotUnavailable
from lance_compact.options import result_columns

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# -- checks on a drawn figure -------------------------------------------------------------

def drawn(h):
    fig = h.figure()
    fig.canvas.draw()  # matplotlib's Agg renderer: what the PNG is
    return fig, fig.canvas.get_renderer()


def by_gid(fig, pattern):
    return [a for a in fig.findobj(lambda a: re.fullmatch(pattern, str(a.get_gid())) is not None)]


def _in_view(axis, loc):
    lo, hi = sorted(axis.get_view_interval())
    return lo * (1 - 1e-9) <= loc <= hi * (1 + 1e-9)


def text_boxes(fig, renderer):
    """(what, box) of every text drawn: title, legend entries, caption, panel titles, axis
    labels, tick labels (top target axis included) and bar counts."""
    boxes = []

    def add(what, text):
        if text.get_visible() and text.get_text().strip():
            boxes.append((f"{what} {text.get_text()!r}", text.get_window_extent(renderer)))

    legend = by_gid(fig, "legend")[0]
    add("title", legend.get_title())
    for t in legend.get_texts():
        add("legend", t)
    for handle in legend.legend_handles:
        boxes.append(("legend handle", handle.get_window_extent(renderer)))
    add("caption", by_gid(fig, "caption")[0])
    for i, ax in enumerate(fig.axes):
        for axis_name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            for tick in axis.get_major_ticks():
                if _in_view(axis, tick.get_loc()):
                    add(f"panel {i} {axis_name} tick", tick.label1)
                    add(f"panel {i} {axis_name} tick", tick.label2)
            add(f"panel {i} {axis_name} label", axis.label)
        for t in (ax.title, ax._left_title, ax._right_title):
            add(f"panel {i} title", t)
    for t in by_gid(fig, r"count-\d+-\d+"):
        add("count", t)
    return boxes


def assert_no_overlap(fig, renderer):
    boxes = text_boxes(fig, renderer)
    whole = fig.bbox
    for what, b in boxes:
        assert b.x0 >= whole.x0 - 0.5 and b.x1 <= whole.x1 + 0.5 and \
            b.y0 >= whole.y0 - 0.5 and b.y1 <= whole.y1 + 0.5, f"{what} leaves the picture: {b}"
    for i, (a, ba) in enumerate(boxes):
        for c, bc in boxes[i + 1:]:
            w = min(ba.x1, bc.x1) - max(ba.x0, bc.x0)
            h = min(ba.y1, bc.y1) - max(ba.y0, bc.y0)
            assert w <= 0.5 or h <= 0.5, f"{a} overlaps {c}"
    kinds = {w.split(" ")[0] for w, _ in boxes}
    assert {"title", "legend", "caption", "panel"} <= kinds, kinds
    return boxes


def assert_bars_visible(h, fig, renderer, min_px=3.0):
    """Each layout's non-empty buckets are bars at least min_px tall, topped at their count."""
    counts = dict(h.counts())
    for i, (label, _) in enumerate(h.series):
        for b, n in zip(h.buckets, counts[label]):
            bar = by_gid(fig, f"bar-{i}-{b}")
            assert len(bar) == 1
            height = bar[0].get_window_extent(renderer).height
            if n:
                assert height >= min_px, f"{label}: {n} fragments in bucket {b} drawn {height:.1f} px tall"
                assert bar[0].get_y() + bar[0].get_height() == pytest.approx(n)
            else:
                assert height < 0.5


def assert_target_marked(h, fig):
    assert h.target
    lines = by_gid(fig, r"target-\d+")
    assert len(lines) == len(h.series)
    for line in lines:
        ax = line.axes
        x = line.get_xdata()[0]
        assert x == h.target
        pixel = ax.transData.transform((x, 1.0))[0]
        assert ax.transData.inverted().transform((pixel, 1.0))[0] == pytest.approx(h.target, rel=1e-6)
        b = h.target.bit_length() - 1  # inside the bucket holding the target
        left, right = (ax.transData.transform((v, 1.0))[0] for v in (2 ** b, 2 ** (b + 1)))
        assert left - 0.01 <= pixel < right
    top = by_gid(fig, "target-axis")[0]
    assert list(top.get_xticks()) == [h.target]
    assert [t.get_text() for t in top.get_xticklabels()] == [f"target {h.target:,}"]


def check_picture(h):
    fig, renderer = drawn(h)
    boxes = assert_no_overlap(fig, renderer)
    assert_bars_visible(h, fig, renderer)
    if h.target:
        assert_target_marked(h, fig)
    return boxes


# -- the text form ------------------------------------------------------------------------

CELL = re.compile(r"#+ ([\d,]+)(?: \(d ([\d,]+): [\d.]+%\))?")


def parse_text(lines):
    """{label: {bucket start: (fragments, fragments with deletions)}}, the caption line, and
    the bucket the target marker is on, from the text histogram."""
    header = lines[1].split(" | ")
    labels = [re.sub(r" \((before|after)\)$", "", x.strip()) for x in header[1:]]
    sep = [i for i, line in enumerate(lines) if re.fullmatch(r"-+(\+-+)+", line)]
    assert len(sep) == 2, lines
    out = {label: {} for label in labels}
    target_at = None
    for line in lines[sep[0] + 1:sep[1]]:
        parts = line.split(" | ")
        start = int(parts[0].split(" - ")[0].strip().replace(",", ""))
        if "<- target" in line:
            target_at = start
        for label, cell in zip(labels, parts[1:] + [""] * (len(labels) - len(parts) + 1)):
            m = CELL.search(cell)
            if m:
                out[label][start] = (int(m.group(1).replace(",", "")),
                                     int((m.group(2) or "0").replace(",", "")))
    return out, lines[sep[1] + 1], target_at


def bucket_start(rows):
    return 0 if rows < 2 else 2 ** (rows.bit_length() - 1)


def expected_buckets(ds):
    """Fragments and fragments with deletions per bucket, straight from Lance's manifest."""
    out = {}
    for f in ds.get_fragments():
        m = f.metadata
        deleted = m.deletion_file.num_deleted_rows if m.deletion_file else 0
        n, d = out.get(bucket_start(m.physical_rows - deleted), (0, 0))
        out[bucket_start(m.physical_rows - deleted)] = (n + 1, d + bool(deleted))
    return out


def histogram_lines(spark, table, args=""):
    df = spark.sql(f"CALL lance.describe_layout(table => '{table}', histogram => true{args})")
    assert df.columns == ["histogram"]
    return [r.histogram for r in df.collect()]


def png_size(data):
    assert data[:8] == PNG_MAGIC
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


# -- tables -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def one_fragment(warehouse):
    path = warehouse / "db" / "one.lance"
    shutil.rmtree(path, ignore_errors=True)
    lance.write_dataset(batch(0, 37), str(path))
    return "db.one", path


@pytest.fixture(scope="module")
def six_hundred(spark, warehouse):
    """600 fragments, deletions in some, compacted to a handful: (table, path, before, after,
    describe_layout's row before)."""
    path = warehouse / "db" / "six_hundred.lance"
    shutil.rmtree(path, ignore_errors=True)
    before = degraded_table(str(path), fragments=600, rows_per_fragment=20)
    row = spark.sql("CALL lance.describe_layout(table => 'db.six_hundred', "
                    "target_rows_per_fragment => 4096)").collect()[0]
    r = spark.sql("CALL lance.compact(table => 'db.six_hundred', target_rows_per_fragment => 4096)").collect()[0]
    after = lance.dataset(str(path))
    assert r.new_version == after.version and len(after.get_fragments()) < 10
    return "db.six_hundred", path, before, after, row


def test_one_fragment_through_call(spark, one_fragment, tmp_path):
    table, path = one_fragment
    ds = lance.dataset(str(path))
    lines = histogram_lines(spark, table)
    counts, caption, target_at = parse_text(lines)
    assert counts == {f"version {ds.version}": expected_buckets(ds)} == {f"version {ds.version}": {32: (1, 0)}}
    assert caption == "fragments 1; rows 37; deleted rows 0; small fragments (under 1,048,576 rows) 1"
    assert target_at == 1_048_576 and "db.one" in lines[0]

    row = spark.sql(f"CALL lance.describe_layout(table => '{table}')").collect()[0]
    h = FragmentHistogram.of(row)
    assert h.to_text().splitlines() == lines
    check_picture(h)
    # The picture the CALL writes is this one, pixel for pixel.
    picture = tmp_path / "one.png"
    lines = histogram_lines(spark, table, f", picture => '{picture}'")
    assert lines[-1] == f"picture: {picture}"
    assert picture.read_bytes() == h.to_png()


def test_six_hundred_fragments_before_and_after(spark, six_hundred, tmp_path):
    table, path, before, after, before_row = six_hundred
    lines = histogram_lines(spark, table, f", compare_version => {before.version}")
    assert [x.strip() for x in lines[1].split(" | ")[1:]] == \
        [f"version {before.version} (before)", f"version {after.version} (after)"]
    counts, caption, target_at = parse_text(lines)
    assert counts == {f"version {before.version}": expected_buckets(before),
                      f"version {after.version}": expected_buckets(after)}
    assert sum(n for n, _ in counts[f"version {before.version}"].values()) == 600
    assert any(d for _, d in counts[f"version {before.version}"].values())  # deletions shown
    deleted = sum(f.metadata.deletion_file.num_deleted_rows for f in before.get_fragments()
                  if f.metadata.deletion_file)
    small_after = sum(1 for f in after.get_fragments() if f.count_rows() < 4096)
    assert caption == (f"fragments 600 -> {len(after.get_fragments())}; "
                       f"rows {before.count_rows():,} -> {after.count_rows():,}; deleted rows {deleted:,} -> 0; "
                       f"small fragments (under 1,048,576 rows) 600 -> {len(after.get_fragments())}")
    assert target_at == 1_048_576

    # The notebook path: describe_layout's rows (a Row before, a DataFrame after), with the
    # target the compaction used.
    h_text = histogram_lines(spark, table, f", compare_version => {before.version}, target_rows_per_fragment => 4096")
    now = describe_layout(spark, table, target_rows_per_fragment=4096)
    (row,) = now.collect()
    assert now.columns == [c for c, _ in result_columns("layout_columns")]
    assert list(before_row.fragment_deleted_rows) == [
        f.metadata.deletion_file.num_deleted_rows if f.metadata.deletion_file else 0 for f in before.get_fragments()]
    assert list(row.fragment_deleted_rows) == [0] * row.fragments
    h = FragmentHistogram.of(before_row, now)
    assert h.target == 4096 and h.to_text().splitlines() == h_text
    assert parse_text(h_text)[1].endswith(f"small fragments (under 4,096 rows) 600 -> {small_after}")
    check_picture(h)

    # Files from a CALL: PNG and SVG, and from PySpark with picture=...
    png, svg = tmp_path / "layout.png", tmp_path / "layout.SVG"
    out = histogram_lines(spark, table, f", compare_version => {before.version}, "
                                        f"target_rows_per_fragment => 4096, picture => '{png}'")
    assert out[:-1] == h_text and out[-1] == f"picture: {png}"
    assert png.read_bytes() == h.to_png() and png_size(png.read_bytes())[0] == 1000
    r = describe_layout(spark, table, picture=str(svg), compare_version=before.version).collect()[0]
    assert r.version == after.version and r.fragments == len(after.get_fragments())  # the layout row
    text = svg.read_text()
    assert text.startswith("<svg") and text.rstrip().endswith("</svg>")
    import xml.dom.minidom
    xml.dom.minidom.parseString(text)
    buckets = len(lines) - 6  # title, header, two rules, caption, key
    assert text.count('class="bar"') == 2 * buckets
    assert not list(tmp_path.glob("*.tmp*"))


def test_hundred_thousand_fragments():
    import random
    rng = random.Random(7)
    rows = [max(1, min(1_000_000, int(rng.lognormvariate(8, 2.6)))) for _ in range(100_000)]
    deleted = [r // 7 if i % 4 == 0 else 0 for i, r in enumerate(rows)]
    after = [1_000_000] * 400 + [12_345]
    h = FragmentHistogram([("version 41", rows, deleted), ("version 44", after, [0] * len(after))],
                          target=1_048_576, title="db.huge", versions=[41, 44])
    counts = dict(h.counts())
    assert sum(counts["version 41"]) == 100_000 and max(counts["version 41"]) > 5000
    boxes = check_picture(h)
    assert len([w for w, _ in boxes if w.startswith("count")]) == sum(1 for c in counts["version 41"] if c) + 2
    parsed, caption, target_at = parse_text(h.text_lines())
    assert {k: v[0] for k, v in parsed["version 41"].items()} == \
        {bucket_start(2 ** b): c for b, c in zip(h.buckets, counts["version 41"]) if c}
    assert parsed["version 44"] == {524_288: (400, 0), 8192: (1, 0)}
    assert caption.startswith("fragments 100,000 -> 401; ") and target_at == 1_048_576
    # Many layouts and long labels still fit: the legend wraps, the caption shrinks.
    many = FragmentHistogram([(f"a rather long label for layout {i}", rows[i::4], deleted[i::4])
                              for i in range(4)], target=100_000, title="db.huge")
    check_picture(many)
    assert png_size(many.to_png())[0] == 1000


@pytest.mark.parametrize("rows,target", [([1], 1), ([0, 0, 1], None), ([], 1_048_576),
                                         ([1_000_000] * 3, 1_000_000), ([5, 6, 7], 8)])
def test_small_and_edge_layouts(rows, target):
    h = FragmentHistogram([("v", rows, [0] * len(rows))], target=target)
    check_picture(h)
    parsed, caption, target_at = parse_text(h.text_lines())
    assert sum(n for n, _ in parsed["v"].values()) == len(rows)
    assert caption.startswith(f"fragments {len(rows)}; ")
    assert target_at == (bucket_start(target) if target else None)


def test_notebook_representations():
    h = FragmentHistogram.of([10, 300, 5000], [4000, 4000])
    png = h._repr_png_()
    assert png_size(png)[0] == 1000
    svg = h._repr_svg_()
    assert svg.startswith("<svg") and svg.count('class="bar"') == 2 * len(h.buckets)
    assert h.to_html().startswith('<img src="data:image/png;base64,')
    assert repr(h) == str(h) == h.to_text() and "layout 1 -> layout 2" in repr(h)


def test_without_matplotlib_the_text_form_still_works(monkeypatch, one_fragment, tmp_path):
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, name, None)
    h = FragmentHistogram.of([10, 300], [310])
    with pytest.raises(PlotUnavailable, match=re.escape("pip install 'lance-spark-compact[plot]'")):
        h.to_png()
    with pytest.raises(ImportError, match=r"\[plot\]"):
        h.save(tmp_path / "x.svg")
    assert h._repr_png_() is None and h._repr_svg_() is None
    assert "fragments 2 -> 1" in h.to_text()
    # The engine's describe_layout, in this process: the text, and a clear error for a picture.
    from lance_compact.errors import CompactionError
    from lance_compact.report.layout import layout_result
    from lance_compact.runtime.envelope import Envelope
    table, path = one_fragment
    request = {"table": table, "uri": str(path), "params": {"histogram": True}}
    result = layout_result(Envelope.parse("layout", json.dumps(request)))
    schema, rows = result.schema, result.json_rows()
    assert schema.lower() == "`histogram` string" and rows[-2][0].startswith("fragments 1; ")
    request["params"]["picture"] = str(tmp_path / "x.png")
    from lance_compact.runtime import driver_conf
    monkeypatch.setattr(driver_conf, "_picture_dir", str(tmp_path))  # as the operator set it
    with pytest.raises(CompactionError, match=re.escape(
            "describe_layout parameter picture: the layout picture needs matplotlib, which is not "
            "installed: pip install 'lance-spark-compact[plot]'")):
        layout_result(Envelope.parse("layout", json.dumps(request)))
    assert not (tmp_path / "x.png").exists()


def test_bad_pictures_and_versions_fail_clearly(spark, six_hundred, tmp_path):
    table, path, before, after, before_row = six_hundred
    version = lance.dataset(str(path)).version
    cases = [
        (f"picture => '{tmp_path}/layout.jpg'", "describe_layout parameter picture must name a .png or .svg file"),
        (f"picture => '{tmp_path}/layout'", "describe_layout parameter picture must name a .png or .svg file"),
        ("picture => 's3://bucket/layout.png'", "describe_layout parameter picture is a local file path"),
        (f"picture => '{tmp_path}/nowhere/layout.png'", "which is not a directory on the driver"),
        (f"compare_version => {before.version}", "compare_version draws an earlier version in the histogram"),
        ("histogram => true, compare_version => 999", "version 999 does not exist"),
        ("picture => 7", "parameter picture expects a string"),
        # Only inside the folder the operator allowed (conftest: the tests' temporary folder).
        (f"picture => '{tmp_path}/../../../escaped.png'", "describe_layout parameter picture must name a file inside"),
        ("picture => '/tmp/escaped.png'", "describe_layout parameter picture must name a file inside"),
        (f"picture => 'file://{tmp_path}/../../../escaped.png'", "must name a file inside"),
    ]
    for args, message in cases:
        with pytest.raises(Exception) as e:
            spark.sql(f"CALL lance.describe_layout(table => '{table}', {args})").collect()
        assert message in str(e.value), (args, str(e.value)[:500])
        assert lance.dataset(str(path)).version == version
    assert list(tmp_path.iterdir()) == []
    # A symlink inside the folder that leads out of it is followed before the check.
    outside = Path(tempfile.mkdtemp(prefix="picture-outside-", dir="/tmp"))
    try:
        (tmp_path / "link").symlink_to(outside)
        with pytest.raises(Exception, match="must name a file inside"):
            describe_layout(spark, table, picture=str(tmp_path / "link" / "layout.png")).collect()
        assert list(outside.iterdir()) == []
    finally:
        (tmp_path / "link").unlink()
        shutil.rmtree(outside)
    with pytest.raises(Exception, match="must name a .png or .svg file"):
        describe_layout(spark, table, picture=str(tmp_path / "layout.gif"))
    with pytest.raises(ValueError, match=r"name a \.png or \.svg file"):
        FragmentHistogram.of([1]).save(tmp_path / "x.jpeg")
    assert lance.dataset(str(path)).version == version

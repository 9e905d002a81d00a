package io.github.lancecompact.spark.ui

import scala.jdk.CollectionConverters._
import scala.xml.{Node, NodeSeq, Text}

import com.fasterxml.jackson.databind.JsonNode
import jakarta.servlet.http.HttpServletRequest
import org.apache.spark.util.kvstore.KVStore

import PageHtml._

/** `/lance/table/?name=<catalog.namespace.table>`: one table as its last health evaluation saw
 * it (health and parts, indices with segments and coverage, clustering, policy), each layout
 * `describe_layout` returned for it as a histogram of fragments by live rows (SVG, drawn here
 * from the layout's `fragment_rows`), and the statements that named it. */
final class TablePage(store: KVStore) extends LanceCompactPage {
  override val prefix = "table"
  override val title = "Lance: table"

  override def render(request: HttpServletRequest, canModify: Boolean, base: String): Seq[Node] = {
    val key = Option(request.getParameter("name")).getOrElse("")
    val health = try Some(store.read(classOf[LanceTableHealthRecord], key)) catch { case _: NoSuchElementException => None }
    health match {
      case None => nav(base, "table") ++ empty("No evaluation of this table is recorded (see the Warehouse page).")
      case Some(h) =>
        val j = row(h.rowJson)
        val short = s"${text(j, "namespace")}.${text(j, "table")}"
        val layouts = store.view(classOf[LanceLayoutRecord]).asScala.toSeq
          .filter(l => l.catalog == h.catalog && (l.table == short || l.table == s"${h.catalog}.$short")).sortBy(_.at)
        val statements = StatementFigures.all(store).filter(s => s.table == short || s.table == s"${h.catalog}.$short" ||
          (s.procedure == "maintain_warehouse" && StatementFigures.results(s).exists(r => text(r, "table") == short)))
        nav(base, "table") ++
        <h4 id="lance-table-name">{short} <small class="text-muted">({h.catalog}, evaluated {when(h.evaluatedAt)})</small></h4> ++
        facts(j) ++ indices(j, h.evaluatedAt) ++
        <h5>Layouts</h5> ++
        (if (layouts.isEmpty) empty("No layout recorded: each compaction of this application records the table's layout before and after it; CALL lance.describe_layout(table => ...) records one too.")
         else <div class="d-flex flex-wrap">{layouts.map(l => TablePage.histogram(l, row(l.rowJson)))}</div>) ++
        <h5>Statements</h5> ++
        (if (statements.isEmpty) empty("No statement of this application named it.")
         else <table class="table table-sm table-bordered"><thead><tr>{Seq("#", "ended", "procedure", "table", "user",
           "outcome", "bytes read", "bytes written", "task-seconds", "elapsed", "message").map(h => <th>{h}</th>)}</tr></thead>
           <tbody>{statements.filter(_.outcome != "running").flatMap(s => HistoryPage.lines(s, Some(short)))}</tbody></table>)
    }
  }

  private def facts(j: JsonNode): Node = {
    def line(label: String, value: String) = <tr><th scope="row">{label}</th><td>{value}</td></tr>
    val reasons = field(j, "reasons").map(_.properties().asScala.map(e => s"${e.getKey}: ${e.getValue.asText}").toSeq).getOrElse(Nil)
    <table class="table table-sm table-bordered" id="lance-table-facts" style="max-width: 60em"><tbody>{
      Seq("health score" -> text(j, "health_score"), "due" -> text(j, "due"), "version" -> text(j, "version"),
        "rows" -> text(j, "rows"), "fragments" -> text(j, "fragments"), "small fragments" -> (text(j, "small_fragments") +
          (if (long(j, "fragments").contains(1L) && long(j, "small_fragments").contains(1L)) " (the only fragment: nothing to merge it with)" else "")),
        "deleted rows" -> text(j, "deleted_rows"), "unindexed rows" -> text(j, "unindexed_rows"),
        "versions" -> (text(j, "versions") + long(j, "reclaimable_versions").filter(_ > 0).map(n =>
          s" ($n reclaimable${long(j, "reclaimable_bytes").map(b => s", ${bytes(b)}").getOrElse("")})").getOrElse("")),
        "last compacted version" -> text(j, "last_compacted_version"),
        "clustering" -> (if (text(j, "cluster_by").isEmpty) "none" else s"${text(j, "cluster_by")}: depth ${text(j, "clustering_depth")}, unclustered rows ${text(j, "unclustered_row_share")}"),
        "policy" -> s"maintenance ${if (text(j, "enabled") == "false") "off" else "on"}, priority ${text(j, "priority")}, target ${text(j, "target_rows_per_fragment")} rows a fragment",
        "error" -> text(j, "error")).filter(_._2.nonEmpty).map { case (k, v) => line(k, v) } ++
      reasons.map(r => line("why", r))
    }</tbody></table>
  }

  /** The health row's indices (structs: name, type, unindexed_fragments, unindexed_rows, segments,
   * built_at: when its newest segment was built, microseconds; its age is counted to the evaluation). */
  private def indices(j: JsonNode, evaluatedAt: Long): NodeSeq = {
    val rows = j.path("rows").asLong(0L)
    val list = field(j, "indices").map(_.elements().asScala.toSeq).getOrElse(Nil)
    <h5>Indices</h5> ++
    (if (list.isEmpty) empty("No index.") else
      <table class="table table-sm table-bordered" id="lance-table-indices" style="max-width: 60em">
        <thead><tr><th>name</th><th>type</th><th>segments</th><th>unindexed fragments</th><th>unindexed rows</th><th>coverage</th><th>built</th></tr></thead>
        <tbody>{list.map { ix =>
          val unindexed = ix.path("unindexed_rows").asLong(0L)
          <tr><td>{text(ix, "name")}</td><td>{text(ix, "type")}</td><td>{text(ix, "segments")}</td>
            <td>{text(ix, "unindexed_fragments")}</td><td>{unindexed.toString}</td>
            <td>{if (rows > 0) f"${100.0 * (rows - unindexed) / rows}%.1f%%" else ""}</td>
            <td>{long(ix, "built_at").map { us => val ms = us / 1000
              s"${duration(math.max(0L, evaluatedAt - ms))} before the evaluation (${when(ms)})" }.getOrElse("")}</td></tr>
        }}</tbody>
      </table>)
  }
}

object TablePage {
  /** Fragments by live rows in power-of-two bins, as an SVG bar chart (the layout picture's bins). */
  def histogram(l: LanceLayoutRecord, j: JsonNode): Node = {
    // describe_layout's row lists each fragment's live rows; a compaction's (the engine's
    // layout_figures.py) the bins themselves, [[bin, fragments], ...], so a large table's is small
    val bins: Map[Int, Int] = field(j, "fragment_rows") match {
      case Some(list) => list.elements().asScala.map(_.asLong).toSeq
        .groupBy(n => if (n <= 0) 0 else 64 - java.lang.Long.numberOfLeadingZeros(n)).view.mapValues(_.size).toMap
      case None => field(j, "bins").map(_.elements().asScala.map(b => b.get(0).asInt -> b.get(1).asInt).toMap).getOrElse(Map.empty)
    }
    val keys = if (bins.isEmpty) Seq(0) else (bins.keys.min to bins.keys.max)
    val top = math.max(1, bins.values.maxOption.getOrElse(1))
    val (w, h, pad) = (360, 180, 30)
    val bw = (w - 2 * pad).toDouble / keys.size
    def label(k: Int) = if (k == 0) "0" else { val lo = 1L << (k - 1); if (lo < 1000) lo.toString else if (lo < 1000000) s"${lo / 1000}k" else s"${lo / 1000000}M" }
    <figure class="me-4 mb-3 lance-layout">
      <svg xmlns="http://www.w3.org/2000/svg" width={w.toString} height={(h + 40).toString} role="img"
           aria-label={s"fragments by live rows at version ${text(j, "version")}"}>
        <line x1={pad.toString} y1={h.toString} x2={(w - pad).toString} y2={h.toString} stroke="#444"/>
        {keys.zipWithIndex.map { case (k, i) =>
          val n = bins.getOrElse(k, 0)
          val bh = (h - 20) * n.toDouble / top
          <g>
            <rect x={(pad + i * bw + 1).toString} y={(h - bh).toString} width={math.max(1.0, bw - 2).toString} height={bh.toString} fill="#4c78a8"><title>{s"$n fragments of ${label(k)}+ rows"}</title></rect>
            {if (n > 0) <text x={(pad + i * bw + bw / 2).toString} y={(h - bh - 3).toString} font-size="10" text-anchor="middle">{n.toString}</text> else NodeSeq.Empty}
            <text x={(pad + i * bw + bw / 2).toString} y={(h + 14).toString} font-size="9" text-anchor="middle">{label(k)}</text>
          </g>
        }}
        <text x={(w / 2).toString} y={(h + 32).toString} font-size="11" text-anchor="middle">live rows per fragment (from)</text>
      </svg>
      <figcaption class="small">{s"version ${text(j, "version")}${if (text(j, "moment").nonEmpty) s" (${text(j, "moment")})" else ""}: ${text(j, "fragments")} fragments, ${text(j, "rows")} rows, ${text(j, "deleted_rows")} deleted (${when(l.at)})"}</figcaption>
    </figure>
  }
}

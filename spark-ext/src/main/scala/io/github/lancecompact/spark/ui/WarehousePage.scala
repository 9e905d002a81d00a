package io.github.lancecompact.spark.ui

import scala.jdk.CollectionConverters._
import scala.xml.{Node, NodeSeq, Unparsed}

import jakarta.servlet.http.HttpServletRequest
import org.apache.spark.util.kvstore.KVStore

import PageHtml._

/** `/lance/`: every table of every `lance` catalog as the last `system.table_health`
 * evaluation saw it (the records [[LanceUiListener]] keeps; no table is opened or listed here),
 * its time shown. Worst health first; sortable and filterable in the browser. */
final class WarehousePage(store: KVStore) extends LanceCompactPage {
  override val prefix = ""
  override val title = "Lance: warehouse"

  private val headers = Seq("table", "health", "parts", "due", "last maintained", "size", "rows", "fragments",
    "small fragments", "deleted rows", "unindexed rows", "clustering depth", "evaluated")

  override def render(request: HttpServletRequest, canModify: Boolean, base: String): Seq[Node] = {
    val records = store.view(classOf[LanceTableHealthRecord]).asScala.toSeq.sortBy(r => (r.score, r.key))
    val latest = if (records.isEmpty) 0L else records.map(_.evaluatedAt).max
    nav(base, "") ++
    <p id="lance-evaluated">{
      if (records.isEmpty) "No evaluation yet: SELECT * FROM lance.system.table_health (or a maintain_warehouse dry run, then that query) fills this page."
      else s"${records.size} tables, as of the last evaluation of system.table_health: ${when(latest)}."
    }</p> ++
    (if (records.isEmpty) NodeSeq.Empty else table("lance-warehouse", headers, Seq(Unparsed(records.map(_.line).mkString)), "filter tables"))
  }
}

object WarehousePage {
  /** A table's row on the page, from its health row `j`. Its link is relative (the page is
   * always at `.../lance/`), so the row is the same behind any proxy or in the history server. */
  def line(key: String, catalog: String, evaluatedAt: Long, j: com.fasterxml.jackson.databind.JsonNode): Node = {
    val name = s"${text(j, "namespace")}.${text(j, "table")}"
    val error = text(j, "error")
    val score = long(j, "health_score")
    val hours = double(j, "hours_since_compaction")
    def n(c: String) = long(j, c)
    // A thousand of these make the page: no more elements than the figures need (a plain number
    // sorts as one without a key; whitespace between cells dropped by trim).
    def num(c: String): Node = <td>{n(c).map(_.toString).getOrElse("")}</td>
    val parts = Seq(
      // a table of one fragment has nothing to merge it with, whatever its size: not "small 100%"
      (if (n("fragments").exists(_ <= 1)) n("fragments").map(v => if (v == 1) "one fragment" else "no fragment")
       else double(j, "small_fragment_ratio").map(v => f"small ${v * 100}%.0f%%")),
      double(j, "deleted_row_ratio").map(v => f"deleted ${v * 100}%.1f%%"),
      n("unindexed_fragments").filter(_ > 0).map(v => s"unindexed fragments $v"),
      n("reclaimable_versions").filter(_ > 0).map(v => s"old versions $v")).flatten.mkString(", ")
    scala.xml.Utility.trim(
    <tr data-table={name}>
      <td><a href={s"table/?name=${java.net.URLEncoder.encode(key, "UTF-8")}"} title={s"catalog $catalog"}>{name}</a>{
        if (error.nonEmpty) <div class="text-danger small">{error}</div> else NodeSeq.Empty}</td>
      <td>{score.map(_.toString).getOrElse("")}</td>
      <td class="small">{parts}</td>
      <td>{text(j, "due")}</td>
      {cell(scala.xml.Text(hours.map(h => s"${duration((h * 3600000).toLong)} ago (version ${text(j, "last_compacted_version")})").getOrElse("never compacted")), hours.getOrElse(Double.MaxValue))}
      {n("bytes").map(b => cell(scala.xml.Text(bytes(b)), b)).getOrElse(<td></td>)}
      {num("rows")}{num("fragments")}{num("small_fragments")}{num("deleted_rows")}{num("unindexed_rows")}
      <td>{double(j, "clustering_depth").map(d => f"$d%.2f").getOrElse("")}</td>
      <td>{when(evaluatedAt)}</td>
    </tr>)
  }
}

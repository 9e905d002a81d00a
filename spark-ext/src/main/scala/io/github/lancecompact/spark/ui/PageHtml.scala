package io.github.lancecompact.spark.ui

import java.time.{Instant, ZoneOffset}
import java.time.format.DateTimeFormatter

import scala.jdk.CollectionConverters._
import scala.xml.{Node, NodeSeq, Unparsed}

import com.fasterxml.jackson.databind.{JsonNode, ObjectMapper}

/** What the Lance tab's pages share: the sub-page links, a sortable table with a filter box
 * (Spark's sorttable.js, which every Spark page loads, sorts by a column's `sorttable_customkey`;
 * the filter hides rows in the browser: one render, no round trip), figures as people read them,
 * and the JSON of a record's row. Scala's XML escapes every text it is given. */
object PageHtml {
  val mapper = new ObjectMapper()
  private val time = DateTimeFormatter.ofPattern("yyyy-MM-dd HH:mm:ss 'UTC'").withZone(ZoneOffset.UTC)

  def when(ms: Long): String = if (ms <= 0) "" else time.format(Instant.ofEpochMilli(ms))

  def bytes(n: Long): String =
    if (n < 0) "" else if (n < 1024) s"$n B"
    else {
      val units = Seq("KiB", "MiB", "GiB", "TiB", "PiB")
      val e = math.min(units.size, (math.log(n.toDouble) / math.log(1024)).toInt)
      f"${n / math.pow(1024, e)}%.1f ${units(e - 1)}"
    }

  def duration(ms: Long): String =
    if (ms < 0) "" else if (ms < 1000) s"$ms ms" else if (ms < 60000) f"${ms / 1000.0}%.1f s"
    else if (ms < 3600000) f"${ms / 60000.0}%.1f min" else f"${ms / 3600000.0}%.1f h"

  /** A row's JSON object (an empty object for none). */
  def row(json: String): JsonNode =
    if (json == null || json.isEmpty) mapper.createObjectNode() else mapper.readTree(json)

  def rows(json: String): Seq[JsonNode] = LanceUiListener.rows(mapper, json)

  def field(r: JsonNode, name: String): Option[JsonNode] = Option(r.get(name)).filterNot(_.isNull)
  def text(r: JsonNode, name: String): String = field(r, name).map(v =>
    if (v.isArray) v.elements().asScala.map(_.asText).mkString(", ") else v.asText).getOrElse("")
  def long(r: JsonNode, name: String): Option[Long] = field(r, name).filter(_.isNumber).map(_.asLong)
  def double(r: JsonNode, name: String): Option[Double] = field(r, name).filter(_.isNumber).map(_.asDouble)

  /** The tab's pages, this one marked. */
  def nav(base: String, active: String): Node =
    <ul class="nav nav-tabs mb-3" id="lance-nav">{
      Seq("" -> "Warehouse", "running" -> "Running", "history" -> "History").map { case (p, label) =>
        <li class="nav-item"><a class={if (p == active) "nav-link active" else "nav-link"} href={s"$base/lance/$p"}>{label}</a></li>
      }
    }</ul>

  /** A cell whose sort key is `key` (numbers sort as numbers). */
  def cell(shown: NodeSeq, key: Any, cls: String = ""): Node =
    <td sorttable_customkey={String.valueOf(key)} class={cls}>{shown}</td>

  /** A sortable table with a filter box over its rows (`id` names both). */
  def table(id: String, headers: Seq[String], body: Seq[Node], placeholder: String): NodeSeq =
    <div class="mb-2">
      <input type="search" id={s"$id-filter"} class="form-control form-control-sm" style="max-width: 24em"
             placeholder={placeholder} aria-label={placeholder}/>
    </div>
    <table id={id} class="table table-bordered table-sm table-striped sortable">
      <thead><tr>{headers.map(h => <th>{h}</th>)}</tr></thead>
      <tbody>{body}</tbody>
    </table>
    <script>{Unparsed(
      s"""(function () {
         |  var box = document.getElementById('$id-filter'), rows = document.getElementById('$id').tBodies[0].rows;
         |  box.addEventListener('input', function () {
         |    var q = box.value.toLowerCase();
         |    for (var i = 0; i < rows.length; i++) rows[i].style.display = rows[i].textContent.toLowerCase().indexOf(q) >= 0 ? '' : 'none';
         |  });
         |})();""".stripMargin)}</script>

  /** `node` as HTML text: every element closed by its own end tag (`<td></td>`, never `<td/>`,
   * which HTML reads as an open tag). */
  def html(node: Node): String =
    scala.xml.Utility.serialize(node, minimizeTags = scala.xml.MinimizeMode.Never).toString

  def empty(what: String): Node = <p class="text-muted">{what}</p>
}

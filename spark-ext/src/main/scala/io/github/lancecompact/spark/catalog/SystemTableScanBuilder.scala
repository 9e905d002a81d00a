package io.github.lancecompact.spark.catalog

import com.fasterxml.jackson.databind.ObjectMapper
import com.fasterxml.jackson.databind.node.ObjectNode
import org.apache.spark.sql.connector.read.{Scan, ScanBuilder, SupportsPushDownFilters}
import org.apache.spark.sql.sources._

/** A system table's scan with the query's filters pushed down: `namespace` and `table` by `=`
 * or `IN` (the engine opens only those tables), and for the history `version` by `=`, `>`,
 * `>=`, `<`, `<=` (the engine decodes only those versions). Every filter is also handed back
 * to Spark, which applies it after the scan: a pushed filter only narrows what is read, so a
 * filter this side reads loosely (or not at all) never changes a query's answer.
 */
final class SystemTableScanBuilder(table: SystemTable, versions: Boolean)
  extends ScanBuilder with SupportsPushDownFilters {
  private val mapper = new ObjectMapper()
  private var names: Map[String, Set[String]] = Map.empty  // column -> the values allowed
  private var ranges: Seq[(String, Long)] = Seq.empty
  private var used: Array[Filter] = Array.empty

  private def narrow(column: String, values: Set[String]): Unit =
    names = names.updated(column, names.get(column).map(_ & values).getOrElse(values))

  private def number(v: Any): Option[Long] = v match {
    case n: java.lang.Long => Some(n.longValue)
    case n: java.lang.Integer => Some(n.longValue)
    case n: java.lang.Short => Some(n.longValue)
    case n: java.lang.Byte => Some(n.longValue)
    case _ => None
  }

  /** Whether `f` was read (narrowed what the engine reads). */
  private def read(f: Filter): Boolean = f match {
    case EqualTo(c @ ("namespace" | "table"), v: String) => narrow(c, Set(v)); true
    case In(c @ ("namespace" | "table"), vs) if vs.forall(_.isInstanceOf[String]) =>
      narrow(c, vs.map(_.asInstanceOf[String]).toSet); true
    case And(a, b) => val x = read(a); val y = read(b); x || y
    case EqualTo("version", v) if versions => number(v).exists { n => ranges :+= ("=" -> n); true }
    case GreaterThan("version", v) if versions => number(v).exists { n => ranges :+= (">" -> n); true }
    case GreaterThanOrEqual("version", v) if versions => number(v).exists { n => ranges :+= (">=" -> n); true }
    case LessThan("version", v) if versions => number(v).exists { n => ranges :+= ("<" -> n); true }
    case LessThanOrEqual("version", v) if versions => number(v).exists { n => ranges :+= ("<=" -> n); true }
    case _ => false
  }

  override def pushFilters(filters: Array[Filter]): Array[Filter] = {
    used = filters.filter(read)
    filters  // Spark still applies all of them after the scan
  }

  override def pushedFilters(): Array[Filter] = used

  override def build(): Scan = {
    if (used.isEmpty) return table.scan(None)
    val f: ObjectNode = mapper.createObjectNode()
    names.foreach { case (column, values) =>
      val a = f.putArray(column)
      values.toSeq.sorted.foreach(a.add)
    }
    if (ranges.nonEmpty) {
      val a = f.putArray("version")
      ranges.foreach { case (op, n) => a.addArray().add(op).add(n) }
    }
    table.scan(Some(f), names.get("namespace"))
  }
}

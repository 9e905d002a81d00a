package io.github.lancecompact.spark.catalog

import java.util

import org.apache.spark.sql.connector.catalog.{SupportsRead, Table, TableCapability}
import org.apache.spark.sql.connector.expressions.{Expression, NamedReference}
import org.apache.spark.sql.connector.expressions.aggregate.{Aggregation, Count, CountStar, Max, Min, Sum}
import org.apache.spark.sql.connector.read.{Scan, ScanBuilder, SupportsPushDownAggregates, SupportsPushDownRequiredColumns}
import org.apache.spark.sql.types.StructType
import org.apache.spark.sql.util.CaseInsensitiveStringMap

import io.github.lancecompact.spark.engine.PythonEngine

/** `lance.db.t.fragments`, `lance.db.t.versions`, `lance.db.t.indices`: what Lance's manifests
 * say of the table, as read-only tables. The `fragments` table (a row per fragment) is read with
 * only the columns a query names (`count(*)`: none): its schema is asked for alone, then the
 * pruned scan; the others are read whole, once. */
final class MetadataTable(ref: TableRef, kind: String) extends Table with SupportsRead {
  private val pruned = kind == "fragments"
  private lazy val result = PythonEngine.query("metadata", ref.request(_.put("kind", kind)))
  private lazy val described =
    if (pruned) PythonEngine.query("metadata", ref.request { r => r.put("kind", kind); r.put("schema_only", true) })
    else result
  override def name(): String = s"${ref.name}.$kind"
  override def schema(): StructType = described.readSchema()
  override def capabilities(): util.Set[TableCapability] = util.EnumSet.of(TableCapability.BATCH_READ)
  override def newScanBuilder(options: CaseInsensitiveStringMap): ScanBuilder =
    if (!pruned) new ScanBuilder { override def build(): Scan = result }
    else new ScanBuilder with SupportsPushDownRequiredColumns with SupportsPushDownAggregates {
      private var required: StructType = schema()
      /** Pushed aggregates (function, column), when Spark pushed them: one row of partial results. */
      private var aggregates: Option[Seq[(String, String)]] = None
      override def pruneColumns(requiredSchema: StructType): Unit = required = requiredSchema
      // count(*), count, sum, min and max of the columns the engine holds as arrays (no group, no
      // filter: Spark pushes aggregates only when every filter was pushed, and this scan takes
      // none): the engine answers them from those arrays, one row, instead of a row per fragment
      // sent to the JVM to be counted. Partial results: Spark's own aggregate finishes them.
      override def pushAggregation(aggregation: Aggregation): Boolean = {
        if (aggregation.groupByExpressions().nonEmpty) return false
        val asked = aggregation.aggregateExpressions().toSeq.map {
          case _: CountStar => Some(("count_star", null))
          case c: Count if !c.isDistinct => held(c.column).map(("count", _))
          case s: Sum if !s.isDistinct => held(s.column).map(("sum", _))
          case m: Min => held(m.column).map(("min", _))
          case m: Max => held(m.column).map(("max", _))
          case _ => None
        }
        if (asked.exists(_.isEmpty)) false else { aggregates = Some(asked.flatten); true }
      }
      private def held(e: Expression): Option[String] = e match {
        case r: NamedReference if r.fieldNames().length == 1 && MetadataTable.Aggregable(r.fieldNames().head) =>
          Some(r.fieldNames().head)
        case _ => None
      }
      override def build(): Scan = PythonEngine.query("metadata", ref.request { r =>
        r.put("kind", kind)
        aggregates match {
          case Some(asked) =>
            val list = r.putArray("aggregates")
            asked.foreach { case (function, column) => list.addArray().add(function).add(column) }
          case None =>
            val columns = r.putArray("columns")
            required.fieldNames.foreach(c => columns.add(c))
        }
      })
    }
}

object MetadataTable {
  val Kinds: Set[String] = Set("fragments", "versions", "indices")
  /** The fragments table's columns whose aggregates the engine answers (fragment_facts' arrays). */
  val Aggregable: Set[String] = Set("id", "live_rows", "deleted_rows", "physical_rows")
}

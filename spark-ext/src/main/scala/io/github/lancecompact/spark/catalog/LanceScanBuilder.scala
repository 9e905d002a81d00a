package io.github.lancecompact.spark.catalog

import org.apache.spark.sql.connector.expressions.aggregate.{Aggregation, CountStar}
import org.apache.spark.sql.connector.expressions.filter.Predicate
import org.apache.spark.sql.connector.read.{Scan, ScanBuilder, SupportsPushDownAggregates, SupportsPushDownRequiredColumns, SupportsPushDownV2Filters}
import org.apache.spark.sql.types.StructType

import io.github.lancecompact.spark.engine.{PythonEngine, ResultScan}

/** Pushes column pruning, the filters Lance can evaluate (Spark re-checks them all), and a
 * plain count(*) (answered by Lance without reading rows) to the engine's read. */
final class LanceScanBuilder(ref: TableRef, full: StructType) extends ScanBuilder
  with SupportsPushDownRequiredColumns with SupportsPushDownV2Filters with SupportsPushDownAggregates {
  private var required = full
  private var lanceFilter: Option[String] = None
  private var pushed: Array[Predicate] = Array.empty
  private var countOnly = false

  override def pruneColumns(requiredSchema: StructType): Unit = required = requiredSchema

  override def pushPredicates(predicates: Array[Predicate]): Array[Predicate] = {
    val translated = predicates.flatMap(p => LanceFilters.sql(p).map(p -> _))
    pushed = translated.map(_._1)
    if (translated.nonEmpty) lanceFilter = Some(translated.map(t => s"(${t._2})").mkString(" AND "))
    predicates // Spark evaluates all of them again after the read
  }

  override def pushedPredicates(): Array[Predicate] = pushed

  override def supportCompletePushDown(aggregation: Aggregation): Boolean = countable(aggregation)

  override def pushAggregation(aggregation: Aggregation): Boolean = {
    countOnly = countable(aggregation) && lanceFilter.isEmpty
    countOnly
  }

  private def countable(a: Aggregation): Boolean =
    a.groupByExpressions().isEmpty && a.aggregateExpressions().length == 1 &&
      a.aggregateExpressions()(0).isInstanceOf[CountStar]

  override def build(): Scan = {
    if (countOnly) return driverRead(required)
    // Whole top-level columns (Lance reads columns, not nested fields); a scan needs one.
    val names = required.fieldNames.toSet
    val columns = StructType(full.fields.filter(f => names.contains(f.name)) match {
      case Array() => full.fields.take(1)
      case some => some
    })
    if (!ref.distributedReads) return driverRead(columns)
    FragmentScan.build(ref, columns, lanceFilter).getOrElse(driverRead(columns))
  }

  /** The rows read on the driver through the engine (capped by read_max_rows). */
  private def driverRead(columns: StructType): Scan = {
    val request = ref.request { r =>
      r.put("max_rows", ref.readMaxRows)
      if (countOnly) r.put("count_only", true)
      else {
        val cols = r.putArray("columns")
        columns.fieldNames.foreach(cols.add)
      }
      lanceFilter.foreach(f => r.put("filter", f))
    }
    val scan = PythonEngine.query("read", request)
    // The rows carry the engine's types; Spark expects the schema it asked for.
    new ResultScan(if (countOnly) scan.readSchema() else columns, scan.rows())
  }
}

package io.github.lancecompact.spark.catalog

import java.util

import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import com.fasterxml.jackson.databind.ObjectMapper
import com.fasterxml.jackson.databind.node.ObjectNode
import org.apache.spark.internal.Logging
import org.apache.spark.sql.connector.catalog._
import org.apache.spark.sql.connector.expressions.Transform
import org.apache.spark.sql.execution.datasources.DataSource
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.connector.expressions.filter.Predicate
import org.apache.spark.sql.connector.read.{ScanBuilder, SupportsPushDownAggregates, SupportsPushDownRequiredColumns, SupportsPushDownV2Filters, Scan}
import org.apache.spark.sql.connector.expressions.aggregate.{Aggregation, CountStar}
import org.apache.spark.sql.connector.write.{LogicalWriteInfo, RowLevelOperationBuilder, RowLevelOperationInfo, WriteBuilder}
import org.apache.spark.sql.types.StructType
import org.apache.spark.sql.util.CaseInsensitiveStringMap

import io.github.lancecompact.spark.engine.{PythonEngine, ResultScan}

/** Where a table is and how to reach it: what every engine request about it carries. */
final case class TableRef(name: String, location: String, storage: Map[String, String],
                          version: Option[Long] = None, readMaxRows: Long = 1000000L,
                          distributedReads: Boolean = true) {
  private val mapper = new ObjectMapper()

  def request(fill: ObjectNode => Unit = _ => ()): String = {
    val r = mapper.createObjectNode()
    r.put("table", name).put("uri", location)
    version.foreach(v => r.put("version", v))
    val s = r.putObject("storage_options")
    storage.foreach { case (k, v) => s.put(k, v) }
    fill(r)
    mapper.writeValueAsString(r)
  }
}

/** Writes go to Lance or lance-spark: this catalog maintains tables, it does not write them. */
object ReadOnly {
  def refuse(table: String, what: String): Nothing = throw new UnsupportedOperationException(
    s"catalog table $table is read-only: this catalog does not $what tables; write them with Lance " +
      "(pylance) or lance-spark, and compact them here")
}

/** A Lance dataset seen through the catalog: its schema in Spark types, its rows (read on the
 * executors, a partition per group of fragments, all at the version loaded; count(*) is
 * answered from Lance's own count), and nothing written. Metadata tables hang under it ([[MetadataTable]]).
 */
final class LanceTable(ref: TableRef) extends Table with SupportsRead with SupportsWrite
  with SupportsDeleteV2 with SupportsRowLevelOperations {

  private lazy val described = {
    val row = PythonEngine.query("describe", ref.request()).rows().head
    val config = row.getMap(3)
    val props = (0 until config.numElements()).map(i =>
      config.keyArray().getUTF8String(i).toString -> config.valueArray().getUTF8String(i).toString).toMap
    (StructType.fromDDL(row.getUTF8String(0).toString), row.getLong(1), row.getLong(2), props)
  }

  override def name(): String = ref.name
  override def schema(): StructType = described._1
  override def capabilities(): util.Set[TableCapability] =
    util.EnumSet.of(TableCapability.BATCH_READ, TableCapability.BATCH_WRITE)
  /** SHOW TBLPROPERTIES: the Lance table's config (its maintenance settings among them),
   * with its location, provider and version. */
  override def properties(): util.Map[String, String] =
    (described._4 ++ Map("location" -> ref.location, "provider" -> "lance", "version" -> described._3.toString)).asJava

  override def newScanBuilder(options: CaseInsensitiveStringMap): ScanBuilder =
    new LanceScanBuilder(ref.copy(version = Some(ref.version.getOrElse(described._3))), schema())

  override def newWriteBuilder(info: LogicalWriteInfo): WriteBuilder = ReadOnly.refuse(ref.name, "insert into")
  override def canDeleteWhere(predicates: Array[Predicate]): Boolean = ReadOnly.refuse(ref.name, "delete from")
  override def deleteWhere(predicates: Array[Predicate]): Unit = ReadOnly.refuse(ref.name, "delete from")
  override def newRowLevelOperationBuilder(info: RowLevelOperationInfo): RowLevelOperationBuilder =
    ReadOnly.refuse(ref.name, "update, delete from or merge into")
}

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

/** The distributed read: the engine groups the version's fragments (up to Spark's
 * maxPartitionBytes of data files each) and Spark's Python data source `lance_compact_read`
 * (module `pyspark_lance_compact`, registered by Spark itself) reads each group on an executor
 * as Arrow batches. The storage options travel in the source's options, which Spark's plans
 * and event logs do not print (the scan shows as `(Python)` with its read schema). */
object FragmentScan extends Logging {
  val SourceName = "lance_compact_read"

  def build(ref: TableRef, columns: StructType, filter: Option[String]): Option[Scan] = {
    val provider = try DataSource.lookupDataSourceV2(SourceName, SQLConf.get) catch {
      case NonFatal(e) =>
        logWarning(s"reading ${ref.name} on the driver: Spark's Python does not find the data source " +
          s"$SourceName (module pyspark_lance_compact of lance-spark-compact): ${e.getMessage}")
        None
    }
    provider.map { p =>
      val request = ref.request { r =>
        val cols = r.putArray("columns")
        columns.fieldNames.foreach(cols.add)
        filter.foreach(f => r.put("filter", f))
        r.put("partition_bytes", SQLConf.get.filesMaxPartitionBytes)
      }
      val groups = PythonEngine.query("read_plan", request).rows().map(_.getUTF8String(0).toString)
      val options = Map("request" -> request, "partitions" -> groups.mkString("[", ",", "]")).asJava
      p.getTable(columns, Array.empty[Transform], options).asInstanceOf[SupportsRead]
        .newScanBuilder(new CaseInsensitiveStringMap(options)).build()
    }
  }
}

/** `lance.db.t.fragments`, `lance.db.t.versions`, `lance.db.t.indices`: what Lance's manifests
 * say of the table, as read-only tables. */
final class MetadataTable(ref: TableRef, kind: String) extends Table with SupportsRead {
  private lazy val result = PythonEngine.query("metadata", ref.request(_.put("kind", kind)))
  override def name(): String = s"${ref.name}.$kind"
  override def schema(): StructType = result.readSchema()
  override def capabilities(): util.Set[TableCapability] = util.EnumSet.of(TableCapability.BATCH_READ)
  override def newScanBuilder(options: CaseInsensitiveStringMap): ScanBuilder = new ScanBuilder {
    override def build(): Scan = result
  }
}

object MetadataTable {
  val Kinds: Set[String] = Set("fragments", "versions", "indices")
}

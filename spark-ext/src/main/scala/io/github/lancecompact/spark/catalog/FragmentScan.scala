package io.github.lancecompact.spark.catalog

import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import org.apache.spark.internal.Logging
import org.apache.spark.sql.connector.catalog.SupportsRead
import org.apache.spark.sql.connector.expressions.Transform
import org.apache.spark.sql.connector.read.Scan
import org.apache.spark.sql.execution.datasources.DataSource
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.types.StructType
import org.apache.spark.sql.util.CaseInsensitiveStringMap

import io.github.lancecompact.spark.engine.PythonEngine

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

package io.github.lancecompact.spark.catalog

import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import org.apache.spark.internal.Logging
import org.apache.spark.sql.connector.catalog.SupportsRead
import org.apache.spark.sql.connector.expressions.Transform
import org.apache.spark.sql.connector.read.Scan
import org.apache.spark.sql.execution.datasources.v2.python.LanceCompactReadSource
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.types.StructType
import org.apache.spark.sql.util.CaseInsensitiveStringMap

import io.github.lancecompact.spark.engine.PythonEngine

/** The distributed read: the engine groups the version's fragments (up to Spark's
 * maxPartitionBytes of data files each) and a Spark Python data source reads each group on an
 * executor as Arrow batches. That source is registered under no name
 * (LanceCompactReadSource.scala): SQL cannot name it, so the only read requests it ever gets
 * are the ones built here, from a table the catalog resolved (inside its warehouse, with its
 * credential rule applied). The storage options travel in the source's options, which Spark's
 * plans and event logs do not print (the scan shows as `(Python)` with its read schema). */
object FragmentScan extends Logging {
  /** The session setting Spark 4 runs its Python workers with (UDFs, Python data sources):
   * Spark's runners read it from the session's SQL configuration, so a SQL user could otherwise
   * `SET` it and have this read start a program of their choosing (issue 33, attack pass). */
  val WorkerPython = "spark.sql.execution.pyspark.python"

  /** Refuses a read whose session chose Spark's Python worker program: it must be one the
   * operator's start already names (the driver's static settings, the JVM's environment, as
   * Spark and the engine pick theirs: EngineProcess.pythonExec), or unset. A session naming one
   * of those -- `configure_spark_with_lance_compact` on a running notebook sets this Python --
   * reads. */
  def checkWorkerPython(ref: TableRef): Unit = {
    val session = Option(SQLConf.get.getConfString(WorkerPython, null))
    val conf = Option(org.apache.spark.SparkEnv.get).map(_.conf)
    val named: Set[String] = (Seq(WorkerPython, "spark.pyspark.python", "spark.pyspark.driver.python")
      .flatMap(k => conf.flatMap(_.getOption(k))) ++
      Seq("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON").flatMap(sys.env.get)).toSet
    if (session.exists(p => !named.contains(p))) throw new IllegalArgumentException(
      s"table ${ref.name}: $WorkerPython is set in this session; the catalog's distributed read runs " +
        s"Spark's Python workers, whose program is the driver's to choose (its static configuration), " +
        s"never a session's. RESET $WorkerPython")
  }

  def build(ref: TableRef, columns: StructType, filter: Option[String]): Option[Scan] = {
    checkWorkerPython(ref)
    val request = ref.request { r =>
      val cols = r.putArray("columns")
      columns.fieldNames.foreach(cols.add)
      filter.foreach(f => r.put("filter", f))
      r.put("partition_bytes", SQLConf.get.filesMaxPartitionBytes)
    }
    val groups = PythonEngine.query("read_plan", request).rows().map(_.getUTF8String(0).toString)
    val options = Map("request" -> request, "partitions" -> groups.mkString("[", ",", "]")).asJava
    val provider = try {
      val p = LanceCompactReadSource()
      p.prepare(new CaseInsensitiveStringMap(options), columns)
      Some(p)
    } catch {
      // LinkageError too: the source extends a Spark class that is not public API
      case e: Throwable if NonFatal(e) || e.isInstanceOf[LinkageError] =>
        logWarning(s"reading ${ref.name} on the driver: Spark's Python workers cannot run the distributed " +
          s"read (lance_compact.catalog.read_source of lance-spark-compact): ${e.getMessage}")
        None
    }
    provider.map { p =>
      p.getTable(columns, Array.empty[Transform], options).asInstanceOf[SupportsRead]
        .newScanBuilder(new CaseInsensitiveStringMap(options)).build()
    }
  }
}

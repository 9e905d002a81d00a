package io.github.lancecompact.spark.engine

import java.util.UUID

import org.apache.spark.QueryContext
import org.apache.spark.internal.Logging
import org.apache.spark.sql.{AnalysisException, Row, SparkSession}
import org.apache.spark.sql.catalyst.{CatalystTypeConverters, InternalRow}
import org.apache.spark.sql.connector.read.LocalScan
import org.apache.spark.sql.types.StructType

/** A user's error (bad input, a conflicting writer, a failed task), with the message the
 * engine or the catalog wrote for the user. An AnalysisException (procedures run while the
 * CALL is analysed), so spark-sql, PySpark and the Thrift server show the message itself
 * rather than a stack trace.
 */
final class LanceCompactException(message: String, cause: Throwable)
  extends AnalysisException(message, None, None, Option(cause), None, Map.empty[String, String],
    Array.empty[QueryContext]) {
  // spark-sql prints a stack trace for errors without a SQLSTATE (or an internal XX one).
  override def getSqlState: String = "42000"
}

object LanceCompactException {
  /** Runs `body`, turning the catalog's IllegalArgumentExceptions into LanceCompactException. */
  def userErrors[T](body: => T): T =
    try body
    catch {
      case e: LanceCompactException => throw e
      case e: IllegalArgumentException => throw new LanceCompactException(e.getMessage, e)
    }
}

/** A procedure's result rows, handed back to Spark as a local scan. */
final class ResultScan(schema: StructType, result: Array[InternalRow]) extends LocalScan {
  override def readSchema(): StructType = schema
  override def rows(): Array[InternalRow] = result
  override def description(): String = s"lance_compact result (${result.length} rows)"
}

/** Drives the Python engine (the `lance_compact` data source) through the DataFrame API.
 *
 * The engine holds the orchestration (python/lance_compact/orchestrate.py); this side only
 * runs its phases in order, each as a Spark job with a description naming the table, the
 * phase and the number of tasks.
 */
object PythonEngine extends Logging {
  val Format = "lance_compact"
  private val Marker = "[LANCE_COMPACT]"

  /** Plan, then per batch rewrite on executors and commit on the driver; the result row.
   * The engine decides the batches (partial progress, re-plans after conflicts); this only
   * runs each batch it hands out until it hands out none.
   */
  def compact(table: String, request: String): ResultScan = {
    val spark = SparkSession.active
    val runId = UUID.randomUUID().toString
    val attempts = maxTaskAttempts(spark)
    engineCall(spark, s"lance.compact $table: planning") {
      val plan = read(spark, "plan", runId).option("request", request).load().collect()
      var pending = plan.length.toLong
      var version = plan.headOption.map(_.getAs[Long]("read_version")).getOrElse(0L)
      var failure: Option[Exception] = None
      var round = 1
      var result: Option[ResultScan] = None
      while (result.isEmpty) {
        if (pending > 0) {
          failure = try {
            engineCall(spark, s"lance.compact $table: rewriting $pending tasks planned at version $version " +
                s"(batch $round), then committing") {
              read(spark, "rewrite", runId).load()
                .write.format(Format).option("action", "commit").option("run_id", runId)
                .option("max_attempts", attempts.toString).mode("append").save()
            }
            None
          } catch { case e: Exception => Some(e) }
          round += 1
        }
        // The engine hands out the next batch, or the result when the run is done. After a
        // failed batch it says whether the run goes on (partial progress); if not, the
        // batch's own error is the CALL's.
        val (schema, row) = try engineCall(spark, s"lance.compact $table: next batch or result") {
          val step = read(spark, "step", runId)
          val df = failure.flatMap(failedPartition).fold(step)(p => step.option("failed_partition", p.toString)).load()
          (df.schema, df.collect().head)
        } catch { case e: Exception => throw failure.getOrElse(e) }
        failure = None
        pending = row.getAs[Long]("_next_tasks")
        if (pending == 0) {
          // Columns starting with "_" are the engine's, not the user's.
          val visible = StructType(schema.fields.filterNot(_.name.startsWith("_")))
          result = Some(scan(visible, Array(Row.fromSeq(row.toSeq.take(visible.length)))))
        } else {
          version = row.getAs[Long]("_next_read_version")
        }
      }
      result.get
    }
  }

  private val GaveUp = """Task (\d+) in stage [\d.]+ failed""".r.unanchored

  /** The partition (task of the batch) Spark gave up on, from its job failure. */
  private def failedPartition(e: Throwable): Option[Int] =
    Iterator.iterate(e)(_.getCause).takeWhile(_ != null).flatMap(t => Option(t.getMessage))
      .collectFirst { case GaveUp(p) => p.toInt }

  /** How many attempts Spark gives a task: local[N] 1, local[N,F] F, else spark.task.maxFailures. */
  def maxTaskAttempts(spark: SparkSession): Int = {
    val withRetries = """local\[\s*(?:\d+|\*)\s*,\s*(\d+)\s*\]""".r
    val plain = """local(?:\[\s*(?:\d+|\*)\s*\])?""".r
    spark.sparkContext.master match {
      case withRetries(f) => f.toInt
      case plain() => 1
      case _ => spark.sparkContext.getConf.getInt("spark.task.maxFailures", 4)
    }
  }

  /** The plan compact would run, a row per task; nothing is written. */
  def plan(table: String, request: String): ResultScan = single(table, "plan", "planning (dry run)") {
    _.option("request", request).option("dry_run", "true")
  }

  /** The table's layout report. */
  def layout(table: String, request: String): ResultScan = single(table, "layout", "describing the layout") {
    _.option("request", request)
  }

  /** Lance's cleanup of old versions and orphaned files (or what it would remove). */
  def cleanup(table: String, request: String): ResultScan = single(table, "cleanup", "cleaning up") {
    _.option("request", request)
  }

  private def single(table: String, action: String, phase: String)(
      configure: org.apache.spark.sql.DataFrameReader => org.apache.spark.sql.DataFrameReader): ResultScan = {
    val spark = SparkSession.active
    engineCall(spark, s"lance $table: $phase") {
      val df = configure(read(spark, action, UUID.randomUUID().toString)).load()
      scan(df.schema, df.collect())
    }
  }

  private def read(spark: SparkSession, action: String, runId: String) =
    spark.read.format(Format).option("action", action).option("run_id", runId)

  private def scan(schema: StructType, rows: Array[Row]): ResultScan = {
    val toCatalyst = CatalystTypeConverters.createToCatalystConverter(schema)
    new ResultScan(schema, rows.map(r => toCatalyst(r).asInstanceOf[InternalRow]))
  }

  /** Runs `body` under a job description; engine errors come out with the engine's message. */
  private def engineCall[T](spark: SparkSession, description: String)(body: => T): T = {
    val sc = spark.sparkContext
    val previous = sc.getLocalProperty("spark.job.description")
    sc.setJobDescription(description)
    logInfo(description)
    try body
    catch {
      case e: LanceCompactException => throw e
      case e: Throwable =>
        userMessage(e) match {
          case Some(message) => throw new LanceCompactException(message, e)
          case None => throw e
        }
    } finally sc.setJobDescription(previous)
  }

  /** The engine's message for the user, found in the Python traceback Spark wraps. */
  def userMessage(e: Throwable): Option[String] =
    Iterator.iterate(e)(_.getCause).takeWhile(_ != null).flatMap(t => Option(t.getMessage))
      .collectFirst { case m if m.contains(Marker) =>
        m.substring(m.indexOf(Marker) + Marker.length).trim.linesIterator.next().trim
      }
}

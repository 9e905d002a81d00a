package io.github.lancecompact.spark.engine

import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.ObjectMapper
import org.apache.spark.QueryContext
import org.apache.spark.sql.{AnalysisException, SparkSession}
import org.apache.spark.sql.catalyst.InternalRow
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

/** Hands each procedure call to the driver's Python engine ([[EngineProcess]]) and turns its
 * answer into the procedure's result. The engine holds the orchestration
 * (python/lance_compact/orchestrate.py) and names each Spark job it runs (table, phase,
 * task count); this side only binds and forwards.
 */
object PythonEngine {
  private val mapper = new ObjectMapper()

  /** A warehouse operation on an object store (list, create, drop): rows of (name, kind). */
  def warehouse(request: String): Seq[(String, String)] =
    run("warehouse", request).rows().toSeq.map(r => (r.getUTF8String(0).toString, r.getUTF8String(1).toString))

  /** Any engine action answering with rows (a procedure, describe, read, metadata tables). */
  def query(action: String, request: String): ResultScan = run(action, request)

  /** Parsed result schemas by DDL: an action answers with the same few every time, and Spark's
   * parser takes milliseconds for a wide one. */
  private val schemas = new java.util.concurrent.ConcurrentHashMap[String, StructType]()

  private def schemaOf(ddl: String): StructType = {
    if (schemas.size > 256) schemas.clear() // only the actions' fixed schemas are expected
    schemas.computeIfAbsent(ddl, d => StructType.fromDDL(d))
  }

  private def run(action: String, request: String): ResultScan = {
    val engine = try EngineProcess.get(SparkSession.active) catch {
      case e: IllegalStateException => throw new LanceCompactException(e.getMessage, e)
    }
    val response = try mapper.readTree(engine.call(action, request)) catch {
      case e: IllegalStateException => throw new LanceCompactException(e.getMessage, e)
    }
    if (!response.path("ok").asBoolean(false)) {
      val message = response.path("error").asText("the lance_compact engine failed")
      throw new LanceCompactException(message, null)
    }
    val schema = schemaOf(response.get("schema").asText())
    val rows = response.get("rows").elements().asScala.map(r => JsonRows.row(r, schema)).toArray
    new ResultScan(schema, rows)
  }
}

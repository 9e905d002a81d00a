package io.github.lancecompact.spark.engine

import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.ObjectMapper
import org.apache.spark.QueryContext
import org.apache.spark.sql.{AnalysisException, SparkSession}
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.connector.read.LocalScan
import org.apache.spark.sql.types.StructType

/** A failure of a procedure or of the catalog, with the message the engine or the catalog wrote
 * for the user and an error condition and SQLSTATE saying which kind of failure it is
 * ([[LanceCompactException.Kind]]: bad input, a missing table, a concurrent writer, the object
 * store, a corrupt file, a cancel, our bug). An AnalysisException (procedures run while the CALL
 * is analysed), so spark-sql, PySpark, Connect and the Thrift server show the message itself
 * rather than a stack trace, and `getCondition` / `getSqlState` (Spark's SparkThrowable) name
 * the kind. The message starts with `[CONDITION]`, as Spark's own errors do.
 */
final class LanceCompactException(message: String, cause: Throwable,
                                  val kind: LanceCompactException.Kind = LanceCompactException.InvalidArgument,
                                  /** The rows of a run that did what it could before it failed
                                   * (maintain_warehouse with fail_on_error): recorded, not returned. */
                                  val partial: Option[ResultScan] = None)
  extends AnalysisException(s"[${kind.condition}] $message", None, None, Option(cause), Some(kind.condition),
    Map("message" -> message), Array.empty[QueryContext]) {
  override def getSqlState: String = kind.sqlState
}

object LanceCompactException {
  /** A kind of failure: its error condition and SQLSTATE (docs/failures-and-cancellation.md). */
  final case class Kind(condition: String, sqlState: String)

  val InvalidArgument: Kind = Kind("LANCE_INVALID_ARGUMENT", "22023")
  val TableNotFound: Kind = Kind("LANCE_TABLE_NOT_FOUND", "42P01")
  val ConcurrentWrite: Kind = Kind("LANCE_CONCURRENT_WRITE", "40001")
  val StorageError: Kind = Kind("LANCE_STORAGE_ERROR", "58030")
  val CorruptFile: Kind = Kind("LANCE_CORRUPT_FILE", "XX001")
  val Cancelled: Kind = Kind("LANCE_CANCELLED", "HY008")
  val InternalError: Kind = Kind("LANCE_INTERNAL_ERROR", "XX000")
  /** A process doing the statement's work died or was lost: an engine worker, an executor's
   * Python worker, an executor (58000: a system error; the message says what was committed). */
  val WorkerLost: Kind = Kind("LANCE_WORKER_LOST", "58000")
  /** maintain / maintain_warehouse with fail_on_error => true: everything it could do was done,
   * and some table failed (38000: a routine's failure). */
  val MaintenanceFailed: Kind = Kind("LANCE_MAINTENANCE_FAILED", "38000")

  /** The engine's failure kinds (runtime/failures.py, errors.py) as conditions. */
  def ofEngine(kind: String): Kind = kind match {
    case "invalid" | "config" => InvalidArgument
    case "missing" => TableNotFound
    case "conflict" => ConcurrentWrite
    case "storage" => StorageError
    case "corrupt" => CorruptFile
    case "cancelled" => Cancelled
    case "maintenance_failed" => MaintenanceFailed
    case "worker_lost" => WorkerLost
    case _ => InternalError
  }

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

/** Hands each procedure call to the driver's Python engine ([[EnginePool]]: a worker process of its own) and turns its
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

  private[engine] def schemaOf(ddl: String): StructType = {
    if (schemas.size > 256) schemas.clear() // only the actions' fixed schemas are expected
    // no column (count(*) over a metadata table whose columns were all pruned): Spark's DDL
    // parser refuses an empty text
    schemas.computeIfAbsent(ddl, d => if (d.trim.isEmpty) new StructType() else StructType.fromDDL(d))
  }

  private def run(action: String, request: String): ResultScan = {
    val response = try mapper.readTree(EnginePool.call(SparkSession.active, action, request)) catch {
      case e: EngineFailure => throw new LanceCompactException(e.getMessage, e, e.kind)
      case e: IllegalStateException => throw new LanceCompactException(e.getMessage, e, LanceCompactException.InternalError)
    }
    if (!response.path("ok").asBoolean(false)) {
      val message = response.path("error").asText("the lance_compact engine failed")
      throw new LanceCompactException(message, null, LanceCompactException.ofEngine(response.path("kind").asText("bug")),
        Option(response.get("rows")).map(_ => scan(response)))
    }
    scan(response)
  }

  private def scan(response: com.fasterxml.jackson.databind.JsonNode): ResultScan = {
    val schema = schemaOf(response.get("schema").asText())
    val rows = response.get("rows").elements().asScala.map(r => JsonRows.row(r, schema)).toArray
    new ResultScan(schema, rows)
  }
}

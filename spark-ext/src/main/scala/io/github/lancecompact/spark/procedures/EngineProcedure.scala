package io.github.lancecompact.spark.procedures

import java.util

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow
import org.apache.spark.sql.connector.catalog.procedures.{BoundProcedure, ProcedureParameter, UnboundProcedure}
import org.apache.spark.sql.connector.read.Scan
import org.apache.spark.sql.types.{StructField, StructType}

import io.github.lancecompact.spark.catalog.LanceCatalog
import io.github.lancecompact.spark.engine.{LanceCompactException, MaintenanceMetrics, Progress, PythonEngine, ResultScan}
import io.github.lancecompact.spark.ui.LanceUiPublish

/** What a procedure is: its name, what it does, its parameters in positional order, the
 * engine action that serves it, how a CALL's row becomes the engine's request, and what is
 * done with the result on the driver (metrics). The procedures themselves are a list of these
 * ([[Procedures]]); one class, [[EngineProcedure]], serves them all.
 */
final case class ProcedureSpec(name: String, summary: String, parameters: Array[ProcedureParameter],
                               action: String,
                               binder: (LanceCatalog, Array[ProcedureParameter], InternalRow) => CompactionArguments.Bound =
                                 CompactionArguments.bind,
                               afterwards: ResultScan => Unit = _ => ())

/** A procedure that binds its arguments and hands them to the engine. */
final class EngineProcedure(catalog: LanceCatalog, spec: ProcedureSpec) extends UnboundProcedure {
  override def name(): String = spec.name

  override def description(): String =
    s"${spec.summary} Parameters: ${CompactionArguments.signature(spec.parameters)}"

  // A separate bound object: Spark may call an object that is both before filling defaults.
  override def bind(inputType: StructType): BoundProcedure = LanceCompactException.userErrors {
    CompactionArguments.checkTypes(s"procedure ${spec.name}", spec.parameters, inputType)
    new Bound(CompactionArguments.given(spec.parameters, inputType))
  }

  /** The procedure bound to the parameters a CALL passes ([[CompactionArguments.given]]). */
  private final class Bound(params: Array[ProcedureParameter]) extends BoundProcedure {
    override def name(): String = spec.name
    override def description(): String = EngineProcedure.this.description()
    override def parameters(): Array[ProcedureParameter] = params
    override def isDeterministic: Boolean = false
    override def call(input: InternalRow): util.Iterator[Scan] = LanceCompactException.userErrors {
      val started = System.nanoTime()
      var failed = true
      try {
        val bound = spec.binder(catalog, params, input)
        // the Lance tab's Running and History pages see it (Progress posts its start and steps)
        Progress.statement(spec.name, bound.table, EngineProcedure.budgetMs(bound.request)) { statement =>
          val scan = try PythonEngine.query(spec.action, bound.request) catch {
            case e: LanceCompactException if e.partial.isDefined =>
              spec.afterwards(e.partial.get)  // what the run did before it failed (fail_on_error) still counts
              EngineProcedure.ended(catalog, statement.id, e, Some(e.partial.get))
              throw e
            case e: Exception =>
              EngineProcedure.ended(catalog, statement.id, e, None)
              throw e
          }
          spec.afterwards(scan)
          LanceUiPublish.statementEnded(statement.id, "succeeded", null, scan.readSchema(), scan.rows().toSeq)
          if (spec.action == "layout" && scan.readSchema().fieldNames.contains("fragment_rows")) {
            LanceUiPublish.layoutDescribed(catalog.name(), bound.table, scan.readSchema(), scan.rows().toSeq)
          }
          failed = false
          util.List.of[Scan](scan).iterator()
        }
      } finally MaintenanceMetrics.called(spec.name, System.nanoTime() - started, failed)
    }
  }
}

object EngineProcedure {
  private val mapper = new com.fasterxml.jackson.databind.ObjectMapper()
  private val Duration = """(?i)^\s*([0-9]+(?:\.[0-9]+)?)\s*(d|days?|h|hours?|m|min|minutes?|s|sec|seconds?)\s*$""".r

  /** A statement's time budget (`max_duration`, as the engine's parser reads its common
   * forms) in ms; 0 when it has none or it is written otherwise (the page then shows none). */
  private[procedures] def budgetMs(request: String): Long =
    scala.util.Try(mapper.readTree(request).path("params").path("max_duration").asText("")).toOption.collect {
      case Duration(n, unit) => (n.toDouble * (unit.toLowerCase.head match {
        case 'd' => 86400000L case 'h' => 3600000L case 'm' => 60000L case _ => 1000L })).toLong
    }.getOrElse(0L)

  /** Tell the Lance tab statement `id` failed or was cancelled: its message with every storage
   * option's value of the catalog taken out (the engine's messages are already redacted; this
   * holds for any other), and what it did before (`partial`). */
  private def ended(catalog: LanceCatalog, id: Long, e: Throwable, partial: Option[ResultScan]): Unit = {
    val secrets = catalog.storageOptions.values.filter(_.length >= 4).toSeq.sortBy(-_.length)
    val message = secrets.foldLeft(Option(e.getMessage).getOrElse(e.getClass.getSimpleName))((m, v) => m.replace(v, "*********(redacted)"))
    val outcome = if (message.toLowerCase.contains("cancel")) "cancelled" else "failed"
    LanceUiPublish.statementEnded(id, outcome, message.take(2000), partial.map(_.readSchema()).orNull,
      partial.map(_.rows().toSeq).getOrElse(Nil))
  }

  /** Procedure `name` of `catalog` called as `CALL catalog.name(p => v, ...)` is, with `args` by
   * parameter name (Catalyst values: UTF8String, java.lang.Boolean, java.lang.Long, MapData;
   * the others NULL): the same binding and checks, engine request, progress, cancel and metrics.
   * For the statements Spark hands to the catalog's tables (CREATE INDEX, DROP INDEX). */
  def call(catalog: LanceCatalog, name: String, args: Map[String, Any]): ResultScan = {
    val procedure = Procedures.load(catalog, name)
    val params = Procedures.parameters(name)
    val unknown = args.keySet -- params.map(_.name)
    if (unknown.nonEmpty) throw new IllegalStateException(s"procedure $name has no parameter ${unknown.mkString(", ")}")
    // every parameter positional, in declared order, typed as declared: Spark's CALL binds the same way
    val input = StructType(params.map(p => StructField(p.name, p.dataType)))
    val row = new GenericInternalRow(params.map(p => args.getOrElse(p.name, null)))
    procedure.bind(input).call(row).next().asInstanceOf[ResultScan]
  }
}

package io.github.lancecompact.spark.procedures

import java.util

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.connector.catalog.procedures.{BoundProcedure, ProcedureParameter, UnboundProcedure}
import org.apache.spark.sql.connector.read.Scan
import org.apache.spark.sql.types.StructType

import io.github.lancecompact.spark.catalog.LanceCatalog
import io.github.lancecompact.spark.engine.{LanceCompactException, PythonEngine, ResultScan}

/** A procedure that binds its arguments and hands them to the engine; subclasses say which
 * parameters they take and which engine call they make. Nothing else lives here.
 */
abstract class EngineProcedure(catalog: LanceCatalog) extends UnboundProcedure {
  protected def parameters: Array[ProcedureParameter]
  protected def summary: String
  protected def run(bound: CompactionArguments.Bound): ResultScan

  override def description(): String =
    s"$summary Parameters: ${CompactionArguments.signature(parameters)}"

  // A separate bound object: Spark may call an object that is both before filling defaults.
  override def bind(inputType: StructType): BoundProcedure = LanceCompactException.userErrors {
    CompactionArguments.checkTypes(s"procedure ${name()}", parameters, inputType)
    bound
  }

  private lazy val bound: BoundProcedure = new BoundProcedure {
    override def name(): String = EngineProcedure.this.name()
    override def description(): String = EngineProcedure.this.description()
    override def parameters(): Array[ProcedureParameter] = EngineProcedure.this.parameters
    override def isDeterministic: Boolean = false
    override def call(input: InternalRow): util.Iterator[Scan] = LanceCompactException.userErrors {
      util.List.of[Scan](run(CompactionArguments.bind(catalog, EngineProcedure.this.parameters, input))).iterator()
    }
  }
}

/** `CALL lance.compact(table => ..., ...)`: plan, rewrite on executors, commit; one metrics row. */
final class CompactProcedure(catalog: LanceCatalog) extends EngineProcedure(catalog) {
  override def name(): String = "compact"
  override protected def summary: String =
    "Compacts a Lance table on Spark: merges small fragments and materializes deletions; returns one row of metrics."
  override protected val parameters: Array[ProcedureParameter] = CompactionArguments.compaction
  override protected def run(b: CompactionArguments.Bound): ResultScan = PythonEngine.compact(b.table, b.request)
}

/** `CALL lance.plan_compaction(...)`: the same arguments; a row per task; writes nothing. */
final class PlanCompactionProcedure(catalog: LanceCatalog) extends EngineProcedure(catalog) {
  override def name(): String = "plan_compaction"
  override protected def summary: String =
    "Dry run of compact: one row per task it would run (or leave for later), and why; writes nothing."
  override protected val parameters: Array[ProcedureParameter] = CompactionArguments.compaction
  override protected def run(b: CompactionArguments.Bound): ResultScan = PythonEngine.plan(b.table, b.request)
}

/** `CALL lance.describe_layout(table => ...)`: fragments, deletions, indices, last compaction. */
final class DescribeLayoutProcedure(catalog: LanceCatalog) extends EngineProcedure(catalog) {
  override def name(): String = "describe_layout"
  override protected def summary: String =
    "The table's layout: fragments, small ones, deletions, bytes, indices and their unindexed fragments, last compaction."
  override protected val parameters: Array[ProcedureParameter] =
    CompactionArguments.subset("table", "target_rows_per_fragment", "materialize_deletions_threshold")
  override protected def run(b: CompactionArguments.Bound): ResultScan = PythonEngine.layout(b.table, b.request)
}

/** `CALL lance.cleanup(table => ..., older_than => '7 days', dry_run => true)`: Lance's cleanup. */
final class CleanupProcedure(catalog: LanceCatalog) extends EngineProcedure(catalog) {
  override def name(): String = "cleanup"
  override protected def summary: String =
    "Removes old versions and files of failed or uncommitted writes with Lance's cleanup; dry_run reports only."
  override protected val parameters: Array[ProcedureParameter] = CompactionArguments.cleanup
  override protected def run(b: CompactionArguments.Bound): ResultScan = PythonEngine.cleanup(b.table, b.request)
}

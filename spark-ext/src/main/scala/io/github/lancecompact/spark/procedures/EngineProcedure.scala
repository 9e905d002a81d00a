package io.github.lancecompact.spark.procedures

import java.util

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.connector.catalog.procedures.{BoundProcedure, ProcedureParameter, UnboundProcedure}
import org.apache.spark.sql.connector.read.Scan
import org.apache.spark.sql.types.StructType

import io.github.lancecompact.spark.catalog.LanceCatalog
import io.github.lancecompact.spark.engine.{LanceCompactException, MaintenanceMetrics, PythonEngine, ResultScan}

/** A procedure that binds its arguments and hands them to the engine: each procedure says
 * only its name, what it does, which parameters it takes and which engine call it makes.
 */
abstract class EngineProcedure(catalog: LanceCatalog, procedureName: String, summary: String,
                               parameters: Array[ProcedureParameter],
                               run: (String, String) => ResultScan,
                               binder: (LanceCatalog, Array[ProcedureParameter], InternalRow) => CompactionArguments.Bound =
                                 CompactionArguments.bind) extends UnboundProcedure {
  override def name(): String = procedureName

  override def description(): String =
    s"$summary Parameters: ${CompactionArguments.signature(parameters)}"

  // A separate bound object: Spark may call an object that is both before filling defaults.
  override def bind(inputType: StructType): BoundProcedure = LanceCompactException.userErrors {
    CompactionArguments.checkTypes(s"procedure $procedureName", parameters, inputType)
    bound
  }

  private lazy val bound: BoundProcedure = new BoundProcedure {
    override def name(): String = procedureName
    override def description(): String = EngineProcedure.this.description()
    override def parameters(): Array[ProcedureParameter] = EngineProcedure.this.parameters
    override def isDeterministic: Boolean = false
    override def call(input: InternalRow): util.Iterator[Scan] = LanceCompactException.userErrors {
      val b = binder(catalog, EngineProcedure.this.parameters, input)
      util.List.of[Scan](run(b.table, b.request)).iterator()
    }
  }
}

/** `CALL lance.compact(table => ..., ...)`: plan, rewrite on executors, commit; one metrics row. */
final class CompactProcedure(catalog: LanceCatalog) extends EngineProcedure(catalog, "compact",
  "Compacts a Lance table on Spark: merges small fragments and materializes deletions; returns one row of metrics.",
  CompactionArguments.compaction, PythonEngine.compact)

/** `CALL lance.plan_compaction(...)`: the same arguments; a row per task; writes nothing. */
final class PlanCompactionProcedure(catalog: LanceCatalog) extends EngineProcedure(catalog, "plan_compaction",
  "Dry run of compact: one row per task it would run (or leave for later), and why; writes nothing.",
  CompactionArguments.compaction, PythonEngine.plan)

/** `CALL lance.describe_layout(table => ...)`: fragments, deletions, indices, last compaction;
 * with `histogram => true` the fragment-size histogram as text, a row per line; `picture`
 * draws it into a file on the driver; `compare_version` adds an earlier version beside. */
final class DescribeLayoutProcedure(catalog: LanceCatalog) extends EngineProcedure(catalog, "describe_layout",
  "The table's layout: fragments, small ones, deletions, bytes, indices and their unindexed fragments, last compaction; histogram => true returns the fragment-size histogram as text (a row per line), picture => 'layout.png' or '.svg' also draws it (into the folder spark.lance.compact.picture.dir allows), compare_version => N puts version N beside the current one.",
  CompactionArguments.describeLayout, PythonEngine.layout)

/** `CALL lance.cleanup(table => ..., older_than => '7 days', dry_run => true)`: Lance's cleanup. */
final class CleanupProcedure(catalog: LanceCatalog) extends EngineProcedure(catalog, "cleanup",
  "Removes old versions and files of failed or uncommitted writes with Lance's cleanup; dry_run reports only.",
  CompactionArguments.cleanup, PythonEngine.cleanup)

/** `CALL lance.optimize_indices(table => ..., [indices], [num_indices_to_merge], [retrain], [dry_run])`:
 * Lance's index optimization; one row of what changed. */
final class OptimizeIndicesProcedure(catalog: LanceCatalog) extends EngineProcedure(catalog, "optimize_indices",
  "Adds the rows of fragments an index does not cover yet (appended, or compacted with concurrent deletes carried over) to the table's indices with Lance's optimize_indices; one row of what changed.",
  CompactionArguments.optimizeIndices, PythonEngine.optimizeIndices)

/** `CALL lance.maintain(table => ..., ...)`: compaction, index optimization and cleanup, each
 * when the layout says it is due; a row per step. */
final class MaintainProcedure(catalog: LanceCatalog) extends EngineProcedure(catalog, "maintain",
  "Everyday maintenance: compacts, optimizes indices and cleans up old versions, each only when due; one row per step (ran or skipped, and why); dry_run reports only.",
  CompactionArguments.maintain, PythonEngine.maintain)

/** `CALL lance.maintain_warehouse([namespace], ...)`: every table of the warehouse (or of a
 * namespace) evaluated from its health and policy, the due ones maintained (worst first, then
 * priority) within budgets; a row per table and step. Its figures go to [[MaintenanceMetrics]]. */
final class MaintainWarehouseProcedure(catalog: LanceCatalog) extends EngineProcedure(catalog, "maintain_warehouse",
  "Maintains every table of the warehouse (or of namespace) that its health says needs it: compaction, index optimization and cleanup as maintain does, worst health first then priority, within max_tables, max_bytes and max_duration; opted-out (lance_compact.maintain.enabled=false) and healthy tables are reported as skipped; one row per table and step; dry_run reports only.",
  CompactionArguments.maintainWarehouse, MaintainWarehouseProcedure.run, CompactionArguments.bindWarehouse)

object MaintainWarehouseProcedure {
  def run(what: String, request: String): ResultScan = {
    val scan = PythonEngine.query("maintain_warehouse", request)
    MaintenanceMetrics.record(scan.readSchema(), scan.rows())
    scan
  }
}

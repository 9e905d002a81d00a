package io.github.lancecompact.spark.procedures

import org.apache.spark.sql.connector.catalog.procedures.{ProcedureParameter, UnboundProcedure}

import io.github.lancecompact.spark.catalog.LanceCatalog
import io.github.lancecompact.spark.engine.{LanceCompactException, MaintenanceMetrics}

/** The catalog's procedures by name. Adding one: a spec here, its parameters in
 * parameters.json (CompactionArguments reads them) and its engine action in engine.py. */
object Procedures {
  val SystemNamespace = "system"

  private val specs: Seq[ProcedureSpec] = Seq(
    // plan on the driver, rewrite on executors, commit: one row of metrics
    ProcedureSpec("compact",
      "Compacts a Lance table on Spark: merges small fragments and materializes deletions; returns one row of metrics.",
      CompactionArguments.compaction, "compact"),
    ProcedureSpec("plan_compaction",
      "Dry run of compact: one row per task it would run (or leave for later), and why; writes nothing.",
      CompactionArguments.compaction, "plan"),
    ProcedureSpec("describe_layout",
      "The table's layout: fragments, small ones, deletions, bytes, indices and their unindexed fragments, last compaction, health score and due steps; histogram => true returns the fragment-size histogram as text (a row per line), picture => 'layout.png' or '.svg' also draws it (into the folder spark.lance.compact.picture.dir allows), compare_version => N puts version N beside the current one.",
      CompactionArguments.describeLayout, "layout"),
    ProcedureSpec("cleanup",
      "Removes old versions and files of failed or uncommitted writes with Lance's cleanup; dry_run reports only.",
      CompactionArguments.cleanup, "cleanup"),
    ProcedureSpec("optimize_indices",
      "Adds the rows of fragments an index does not cover yet (appended, or compacted with concurrent deletes carried over) to the table's indices with Lance's optimize_indices; one row of what changed.",
      CompactionArguments.optimizeIndices, "optimize_indices"),
    // also DROP INDEX name ON lance.db.t (LanceTable's SupportsIndex)
    ProcedureSpec("drop_index",
      "Drops one of the table's indices by name with Lance's drop_index, in one commit (its files stay until cleanup); an unknown name is refused, listing the table's indices; one row of what was dropped.",
      CompactionArguments.dropIndex, "drop_index"),
    // segments built by Spark tasks, committed on the driver (indexing/build.py)
    ProcedureSpec("create_index",
      "Builds an index on the cluster: a vector index of several fragment groups has its model trained by one Spark task (Lance samples the table there), then a segment per group built by a Spark task with that model; a vector index of one group is one task that trains its own, as pylance's create_index does; the segments are merged on the driver (on an object store IVF_FLAT, IVF_PQ and IVF_RQ segments are kept as they are) and committed once against the version read; SQ types are one task over every fragment, and a small table in local mode is built by pylance's create_index in the engine; dry_run returns the plan; one row of what was built and where.",
      CompactionArguments.createIndex, "create_index"),
    ProcedureSpec("maintain",
      "Everyday maintenance: compacts, optimizes indices and cleans up old versions, each only when due; one row per step (ran or skipped, and why); dry_run reports only.",
      CompactionArguments.maintain, "maintain"),
    // its figures also go to the metrics source (EnginePlugin)
    ProcedureSpec("maintain_warehouse",
      "Maintains every table of the warehouse (or of namespace) that its health says needs it: compaction, index optimization and cleanup as maintain does, worst health first then priority, within max_tables, max_total_rewrite_bytes and max_duration; opted-out (lance_compact.maintain.enabled=false) and healthy tables are reported as skipped; one row per table and step; dry_run reports only.",
      CompactionArguments.maintainWarehouse, "maintain_warehouse", CompactionArguments.bindWarehouse,
      scan => MaintenanceMetrics.record(scan.readSchema(), scan.rows()))
  )

  private val byName: Map[String, ProcedureSpec] = specs.map(s => s.name -> s).toMap

  def names: Seq[String] = byName.keys.toSeq.sorted

  /** The parameters of procedure `name`, in positional order (a name of [[names]]). */
  def parameters(name: String): Array[ProcedureParameter] = byName(name).parameters

  /** An unknown name fails with a message listing the procedures: a LanceCompactException, which
   * Spark passes on as it is (any other exception it wraps into FAILED_TO_LOAD_ROUTINE, which
   * shows only the name). */
  def load(catalog: LanceCatalog, name: String): UnboundProcedure =
    new EngineProcedure(catalog, byName.getOrElse(name.toLowerCase, throw new LanceCompactException(
      io.github.lancecompact.spark.sql.HabitHints.hint(s"CALL ${catalog.name()}.system.$name()")
        .map(h => s"catalog ${catalog.name()} has no procedure $name: $h")
        .getOrElse(s"catalog ${catalog.name()} has no procedure $name; procedures are ${names.mkString(", ")}"), null)))
}

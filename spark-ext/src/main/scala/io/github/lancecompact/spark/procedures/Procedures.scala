package io.github.lancecompact.spark.procedures

import org.apache.spark.sql.connector.catalog.procedures.UnboundProcedure

import io.github.lancecompact.spark.catalog.LanceCatalog
import io.github.lancecompact.spark.engine.LanceCompactException

/** The catalog's procedures by name. Adding one: a class and one line here. */
object Procedures {
  val SystemNamespace = "system"

  private val builders: Map[String, LanceCatalog => UnboundProcedure] = Map(
    "cleanup" -> (c => new CleanupProcedure(c)),
    "compact" -> (c => new CompactProcedure(c)),
    "plan_compaction" -> (c => new PlanCompactionProcedure(c)),
    "describe_layout" -> (c => new DescribeLayoutProcedure(c)),
    "optimize_indices" -> (c => new OptimizeIndicesProcedure(c)),
    "maintain" -> (c => new MaintainProcedure(c)),
    "maintain_warehouse" -> (c => new MaintainWarehouseProcedure(c))
  )

  def names: Seq[String] = builders.keys.toSeq.sorted

  /** An unknown name fails with a message listing the procedures: a LanceCompactException, which
   * Spark passes on as it is (any other exception it wraps into FAILED_TO_LOAD_ROUTINE, which
   * shows only the name). */
  def load(catalog: LanceCatalog, name: String): UnboundProcedure =
    builders.getOrElse(name.toLowerCase, throw new LanceCompactException(
      s"catalog ${catalog.name()} has no procedure $name; procedures are ${names.mkString(", ")}", null))(catalog)
}

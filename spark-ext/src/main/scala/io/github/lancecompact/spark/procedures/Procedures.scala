package io.github.lancecompact.spark.procedures

import org.apache.spark.sql.connector.catalog.procedures.UnboundProcedure

import io.github.lancecompact.spark.catalog.LanceCatalog

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

  def load(catalog: LanceCatalog, name: String): UnboundProcedure =
    builders.getOrElse(name.toLowerCase, throw new IllegalArgumentException(
      s"catalog ${catalog.name()} has no procedure $name; procedures are ${names.mkString(", ")}"))(catalog)
}

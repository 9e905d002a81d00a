package io.github.lancecompact.spark.procedures

import java.util

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.connector.catalog.procedures.{BoundProcedure, ProcedureParameter, UnboundProcedure}
import org.apache.spark.sql.connector.read.Scan
import org.apache.spark.sql.types.StructType

import io.github.lancecompact.spark.catalog.LanceCatalog
import io.github.lancecompact.spark.engine.PythonEngine

/** `CALL lance.compact(table => ..., ...)`: binds the arguments and hands them to the engine. */
final class CompactProcedure(catalog: LanceCatalog) extends UnboundProcedure {
  override def name(): String = "compact"

  override def description(): String =
    "Compacts a Lance table on Spark: merges small fragments and materializes deletions; returns one row of metrics. " +
      "Parameters: " + CompactionArguments.signature

  // A separate bound object: Spark may call an object that is both before filling defaults.
  override def bind(inputType: StructType): BoundProcedure = {
    CompactionArguments.checkTypes(s"procedure ${name()}", inputType)
    bound
  }

  private val bound: BoundProcedure = new BoundProcedure {
    override def name(): String = CompactProcedure.this.name()
    override def description(): String = CompactProcedure.this.description()
    override def parameters(): Array[ProcedureParameter] = CompactionArguments.parameters
    override def isDeterministic: Boolean = false
    override def call(input: InternalRow): util.Iterator[Scan] = {
      val bound = CompactionArguments.bind(catalog, input)
      util.List.of[Scan](PythonEngine.compact(bound.table, bound.request)).iterator()
    }
  }
}

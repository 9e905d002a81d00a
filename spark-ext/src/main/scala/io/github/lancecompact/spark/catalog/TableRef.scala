package io.github.lancecompact.spark.catalog

import com.fasterxml.jackson.databind.node.ObjectNode

import io.github.lancecompact.spark.engine.EngineRequest

/** Where a table is and how to reach it: what every engine request about it carries. */
final case class TableRef(name: String, location: String, storage: Map[String, String],
                          version: Option[Long] = None, readMaxRows: Long = 1000000L,
                          distributedReads: Boolean = true, warehouse: Option[String] = None) {
  /** An engine request about this table (EngineRequest's envelope), with what `fill` adds. */
  def request(fill: ObjectNode => Unit = _ => ()): String =
    EngineRequest(table = Some(name), uri = Some(location), storage = storage, warehouse = warehouse) { r =>
      version.foreach(v => r.put("version", v))
      fill(r)
    }
}

/** Writes go to Lance or lance-spark: this catalog maintains tables, it does not write them. */
object ReadOnly {
  def refuse(table: String, what: String): Nothing = throw new UnsupportedOperationException(
    s"catalog table $table is read-only: this catalog does not $what tables; write them with Lance " +
      "(pylance) or lance-spark, and compact them here")
}

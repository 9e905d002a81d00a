package io.github.lancecompact.spark.catalog

import com.fasterxml.jackson.databind.ObjectMapper
import com.fasterxml.jackson.databind.node.ObjectNode

/** Where a table is and how to reach it: what every engine request about it carries. */
final case class TableRef(name: String, location: String, storage: Map[String, String],
                          version: Option[Long] = None, readMaxRows: Long = 1000000L,
                          distributedReads: Boolean = true) {
  private val mapper = new ObjectMapper()

  def request(fill: ObjectNode => Unit = _ => ()): String = {
    val r = mapper.createObjectNode()
    r.put("table", name).put("uri", location)
    version.foreach(v => r.put("version", v))
    val s = r.putObject("storage_options")
    storage.foreach { case (k, v) => s.put(k, v) }
    fill(r)
    mapper.writeValueAsString(r)
  }
}

/** Writes go to Lance or lance-spark: this catalog maintains tables, it does not write them. */
object ReadOnly {
  def refuse(table: String, what: String): Nothing = throw new UnsupportedOperationException(
    s"catalog table $table is read-only: this catalog does not $what tables; write them with Lance " +
      "(pylance) or lance-spark, and compact them here")
}

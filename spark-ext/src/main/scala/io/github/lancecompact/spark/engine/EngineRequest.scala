package io.github.lancecompact.spark.engine

import com.fasterxml.jackson.databind.ObjectMapper
import com.fasterxml.jackson.databind.node.ObjectNode

/** The one builder of the engine's request envelope, the JSON object every engine request is
 * (parsed once on the Python side into an `Envelope`: python/lance_compact/runtime/envelope.py):
 * the table it names (`table`, `uri`), how to reach the store (`storage_options`), the catalog
 * and its `maintain.*` settings, a warehouse's `tables` in one shape (objects `{namespace,
 * table, uri}`), the catalog's `warehouse` (in normal form: the engine refuses to open a location
 * outside it), then what the action adds of its own (`fill`: `params`, `op`, `kind`, ...).
 */
object EngineRequest {
  private val mapper = new ObjectMapper()

  def apply(table: Option[String] = None, uri: Option[String] = None,
            storage: Map[String, String] = Map.empty, catalog: Option[String] = None,
            maintainSettings: Map[String, String] = Map.empty,
            tables: Seq[(String, String, String)] = Nil,
            warehouse: Option[String] = None)(fill: ObjectNode => Unit = _ => ()): String = {
    val r = mapper.createObjectNode()
    warehouse.foreach(r.put("warehouse", _))
    table.foreach(r.put("table", _))
    uri.foreach(r.put("uri", _))
    val s = r.putObject("storage_options")
    storage.foreach { case (k, v) => s.put(k, v) }
    catalog.foreach { name =>
      r.put("catalog", name)
      // The catalog's maintenance policy defaults (spark.sql.catalog.<name>.maintain.<key>).
      val m = r.putObject("maintain_settings")
      maintainSettings.foreach { case (k, v) => m.put(k, v) }
    }
    if (tables.nonEmpty) {
      val list = r.putArray("tables")
      tables.foreach { case (namespace, name, location) =>
        list.addObject().put("namespace", namespace).put("table", name).put("uri", location)
      }
    }
    fill(r)
    mapper.writeValueAsString(r)
  }
}

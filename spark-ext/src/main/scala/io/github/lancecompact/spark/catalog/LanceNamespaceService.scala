package io.github.lancecompact.spark.catalog

import java.util.Locale

import com.fasterxml.jackson.databind.ObjectMapper

import org.apache.spark.sql.connector.catalog.Identifier

import io.github.lancecompact.spark.engine.{EngineRequest, LanceCompactException}

/** Tables kept by a catalog service, a Lance Namespace (`impl=rest`, with `uri` and
 * `headers.*` as lance-spark names them; `impl=glue`, with `region`, `endpoint`, `catalog_id` and
 * the Glue client's credentials; `impl=hive2`/`hive3`, a Hive Metastore at `uri=thrift://...`
 * whose tables must lie under `root`), resolved by the engine through the service's own client
 * (python/lance_compact/runtime/catalog_service.py, catalog/namespaces.py): its namespaces and
 * tables, and each table's location from DescribeTable. There is no warehouse folder: the
 * boundary is the catalog's. SQL names tables by identifier; a path given as a table is accepted
 * only when it is the location the service gives for one of its tables, and every location the
 * service returns is put in normal form (as every path is: [[WarehouseBoundary.normalise]]).
 *
 * The service travels to the engine, and from there to every executor, as reserved storage
 * options ([[LanceNamespaceService.Prefix]]: its implementation, its properties, and per table
 * its identifier), so every open of a table (procedures, reads, compaction tasks) goes through
 * the service and gets its storage options and vended credentials, refreshed by Lance before
 * they expire.
 */
final class LanceNamespaceService(catalogName: String, impl: String, properties: Map[String, String],
                                  storage: Map[String, String]) extends EngineNamespaces(catalogName) {
  // Normal form only; a Hive Metastore's tables also inside `root`: the metastore is shared with
  // Hive and Spark's own catalog, whose users may point a table anywhere.
  private val normal = new Warehouse(catalogName,
    if (LanceNamespaceService.HiveImpls(impl)) properties.get("root").map(_.trim) else None)

  /** The catalog's storage options as sent to the engine: the operator's `storage.*` and the service. */
  val storageOptions: Map[String, String] =
    storage ++ properties.map { case (k, v) => s"${LanceNamespaceService.Prefix}$k" -> v } +
      (s"${LanceNamespaceService.Prefix}impl" -> impl)

  /** Those of one table: with its identifier. */
  def tableStorage(id: Seq[String]): Map[String, String] =
    storageOptions + (s"${LanceNamespaceService.Prefix}table_id" -> LanceNamespaceService.json(id))

  override def boundaryRoot: Option[String] = normal.boundaryRoot

  protected def request(op: String, id: Seq[String]): String =
    EngineRequest(storage = storageOptions, warehouse = boundaryRoot) { r =>
      r.put("op", op)
      val ids = r.putArray("id")
      id.foreach(ids.add)
    }

  def namespaceLocation(namespace: Array[String]): String =
    s"$impl catalog service${properties.get("uri").orElse(properties.get("endpoint")).map(u => s" at $u").getOrElse("")}"

  protected def checkedLocation(location: String): String = normal.checkPath(location)
  override protected def locationWhat: String = "the location the catalog service gives: "

  /** A namespace whose name holds a dot is left out: the engine names a listed table's
   * namespace dotted, so it would be another namespace's table. */
  override protected def listed(namespace: Array[String], name: String): Boolean = {
    val dotted = name.contains('.')
    if (dotted) logWarning(s"catalog $catalogName: leaving namespace ${Names.show((namespace :+ name).mkString("."))} " +
      "out: its name holds a '.'")
    !dotted
  }

  override protected def checkNewNamespace(namespace: Array[String]): Unit =
    if (namespace.exists(_.contains('.'))) throw new IllegalArgumentException(
      s"catalog $catalogName: a namespace name holding a '.' is not created in a catalog service")

  /** A path given as a table: only the location the service gives for one of its tables,
   * in normal form; its identifier with it. */
  def tableAt(path: String): (Identifier, String) = {
    val location = try normal.checkPath(path) catch {
      case e: IllegalArgumentException => throw new IllegalArgumentException(
        s"table path '${Names.show(path)}' of catalog $catalogName: ${e.getMessage}", e)
    }
    tablesUnder(Array.empty).tables.collectFirst {
      case (ns, t, l) if l == location => (Identifier.of(ns, t), l)
    }.getOrElse(throw new IllegalArgumentException(
      s"table path '${Names.show(path)}' is not the location catalog $catalogName's service gives for any of its " +
        "tables: name the table by its identifier (<namespace>.<table>); a catalog service's tables are " +
        "reached through the service only"))
  }

  def checkPath(path: String): String = tableAt(path)._2
}

object LanceNamespaceService {
  /** Storage options under this prefix carry the service to the engine; a user's are refused. */
  val Prefix = "lance_compact.catalog."

  /** Implementations served through the engine's Lance Namespace clients. */
  val Impls: Set[String] = Set("rest", "glue", "hive2", "hive3")

  /** The catalog's own settings, not passed to a class-path service (every other one is its property,
   * as lance-spark passes a namespace class the catalog's options). */
  val ClassPathOwnKeys: Set[String] = Set("impl", "warehouse", "single_level_ns", "read_max_rows", "distributed_reads")

  /** A Hive Metastore (lance-namespace-impls' Python Hive2Namespace / Hive3Namespace, over Thrift). */
  val HiveImpls: Set[String] = Set("hive2", "hive3")

  /** A Hive Metastore's settings (lance-spark's keys): its Thrift address, where its Lance tables are,
   * the user and groups it is told, the client pool's size; `parent` (with `parent_delimiter`), the
   * levels every identifier is prefixed with (Hive 3's catalog: `parent=hive` makes `lance.db.t`
   * the metastore's `hive.db.t`). */
  val HiveKeys: Set[String] = Set("uri", "root", "ugi", "client.pool-size", "parent", "parent_delimiter")

  /** Where lance-spark's Java Hive namespaces read the metastore's address (Hadoop's configuration). */
  val HiveUrisKey = "hadoop.hive.metastore.uris"

  /** Glue's settings (lance-spark's keys: the Glue client's region, catalog, endpoint and credentials;
   * `root` where its new tables go). */
  val GlueKeys: Set[String] = Set("region", "catalog_id", "endpoint", "access_key_id", "secret_access_key",
    "session_token", "root", "max_retries", "retry_mode")

  /** The catalog settings passed to the service as its properties (lance-spark's keys;
   * `headers.<name>` as pylance's RestNamespace reads it, `header.<name>`). */
  def properties(impl: String, options: Map[String, String]): Map[String, String] = {
    if (CatalogSettings.classPathImpl(impl)) return options.filterNot { case (k, _) =>
      val l = k.toLowerCase(Locale.ROOT)
      ClassPathOwnKeys.contains(l) || l.startsWith("storage.") || l.startsWith("maintain.")
    }
    val props = options.collect {
      case (k, v) if impl == "rest" && (k.equalsIgnoreCase("uri") || k.equalsIgnoreCase("delimiter")) =>
        k.toLowerCase(Locale.ROOT) -> v
      case (k, v) if impl == "glue" && GlueKeys.contains(k.toLowerCase(Locale.ROOT)) => k.toLowerCase(Locale.ROOT) -> v
      case (k, v) if HiveImpls(impl) && HiveKeys.contains(k.toLowerCase(Locale.ROOT)) => k.toLowerCase(Locale.ROOT) -> v.trim
      case (k, v) if k.toLowerCase(Locale.ROOT).startsWith("headers.") => s"header.${k.substring("headers.".length)}" -> v
      case (k, v) if k.toLowerCase(Locale.ROOT).startsWith("header.") => s"header.${k.substring("header.".length)}" -> v
      case (k, v) if k.toLowerCase(Locale.ROOT).startsWith("tls.") => k -> v
    }
    val hadoopUri = options.collectFirst { case (k, v) if HiveImpls(impl) && k.equalsIgnoreCase(HiveUrisKey) => v.trim }
    if (props.contains("uri")) props else props ++ hadoopUri.map("uri" -> _)
  }

  /** What a service's settings need and may not hold, said before anything asks the service. */
  def check(catalogName: String, impl: String, options: Map[String, String], props: Map[String, String]): Unit = {
    def fail(what: String): Nothing = throw new LanceCompactException(s"catalog $catalogName: $what", null)
    def key(k: String) = s"spark.sql.catalog.$catalogName.$k"
    if (impl == "rest" && !props.contains("uri")) fail(s"impl=$impl needs ${key("uri")} (the service's endpoint)")
    if (HiveImpls(impl)) {
      val uri = props.getOrElse("uri", fail(s"impl=$impl needs ${key("uri")} (the metastore's thrift://host:port)"))
      if (!uri.toLowerCase(Locale.ROOT).startsWith("thrift://") || uri.contains(",")) fail(
        s"impl=$impl: ${key("uri")} '${Names.show(uri)}' is not one metastore's Thrift address (thrift://host:port; " +
          "the engine's Hive client connects to one metastore)")
      if (!props.get("root").exists(_.nonEmpty)) fail(s"impl=$impl needs ${key("root")} (where the catalog's Lance " +
        "tables are: a table the metastore places elsewhere is refused)")
      options.keys.toSeq.sorted.find { k =>
        val l = k.toLowerCase(Locale.ROOT)
        (l.startsWith("hadoop.") && l != HiveUrisKey) || l.startsWith("header") || l.startsWith("tls.")
      }.foreach { k => fail(s"${key(k)} is not applied by impl=$impl: the engine's Hive client (Thrift, without " +
        s"SASL or Kerberos) reads ${HiveKeys.toSeq.sorted.mkString(", ")} (and $HiveUrisKey for uri); remove it") }
    }
  }

  private val mapper = new ObjectMapper()
  def json(id: Seq[String]): String = {
    val a = mapper.createArrayNode()
    id.foreach(a.add)
    mapper.writeValueAsString(a)
  }

  def refuseReserved(catalogName: String, storage: Map[String, String]): Unit =
    storage.keys.find(_.toLowerCase(Locale.ROOT).startsWith("lance_compact.")).foreach { k =>
      throw new LanceCompactException(s"catalog $catalogName: storage option '${Names.show(k)}' is refused: storage " +
        "options named lance_compact.* are reserved for the catalog's own use", null)
    }
}

package io.github.lancecompact.spark.catalog

import java.util

import scala.jdk.CollectionConverters._

import org.apache.spark.SparkEnv
import org.apache.spark.internal.Logging
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.analysis.{NoSuchNamespaceException, NoSuchTableException}
import org.apache.spark.sql.catalyst.parser.{CatalystSqlParser, ParseException}
import org.apache.spark.sql.connector.catalog._
import org.apache.spark.sql.connector.catalog.procedures.UnboundProcedure
import org.apache.spark.sql.connector.expressions.Transform
import org.apache.spark.sql.types.StructType
import org.apache.spark.sql.util.CaseInsensitiveStringMap

import io.github.lancecompact.spark.engine.{EnginePlugin, EnginePool, LanceCompactException, PythonEngine}
import io.github.lancecompact.spark.procedures.Procedures

/** The `lance` catalog: a warehouse of Lance datasets with maintenance procedures.
 *
 * {{{
 * spark.sql.catalog.lance=io.github.lancecompact.spark.catalog.LanceCatalog
 * spark.sql.catalog.lance.warehouse=/data/wh            (or file:/..., s3://bucket/wh)
 * spark.sql.catalog.lance.storage.<key>=<value>         (Lance storage options, sent to every executor)
 * spark.sql.catalog.lance.impl=dir, .root=<dir or URI>   (instead of warehouse: a Lance directory namespace,
 * spark.sql.catalog.lance.single_level_ns=true|false      as lance-spark's catalog lays it out)
 * spark.sql.catalog.lance.impl=rest, .uri=<endpoint>     (a catalog service, a Lance REST namespace:
 * spark.sql.catalog.lance.headers.<name>=<value>          LanceNamespaceService; the operator's only;
 *                                                         also impl=glue, impl=hive2|hive3 with uri and root)
 * spark.sql.catalog.lance.distributed_reads=true         (false: SELECT reads on the driver, up to
 * spark.sql.catalog.lance.read_max_rows=1000000           rows)
 * }}}
 *
 * Registered in the driver's static configuration, the catalog is the operator's: it reads
 * these settings from there only and refuses a session that SETs another value of one
 * ([[CatalogSettings]]). Every namespace and table it reaches passes the warehouse's one
 * boundary ([[WarehouseBoundary]]); identifiers with control characters are refused ([[Names]]).
 */
class LanceCatalog extends TableCatalog with SupportsNamespaces with ProcedureCatalog with Logging {
  private var catalogName: String = "lance"
  private var warehouseRef: TableDirectory = _
  private var storage: Map[String, String] = Map.empty
  private var readMaxRows: Long = 1000000L
  private var distributedReads: Boolean = true
  private var maintain: Map[String, String] = Map.empty
  private var service: Option[LanceNamespaceService] = None

  override def initialize(name: String, sessionOptions: CaseInsensitiveStringMap): Unit = {
    catalogName = name
    // Under the shared-server guard a session defines no catalog (its SQL SET of one is refused;
    // a program's conf call is not SQL): refused here, before a procedure of it could run during
    // the analysis of a CALL, ahead of the guard's plan check.
    val static = Option(SparkEnv.get).map(_.conf)
    if (static.exists(_.get("spark.sql.extensions", "").contains("SharedServerGuard")) &&
      !CatalogSettings.operators(static, name, getClass.getName)) throw new LanceCompactException(
      s"catalog $name is refused on this server (io.github.lancecompact.spark.SharedServerGuard): it is not one of " +
        s"the operator's catalogs (a catalog is defined in the server's static configuration, spark.sql.catalog.$name=...; " +
        "a session defines none)", null)
    // The operator's catalog takes its settings from the static conf only; a user's own
    // catalog only from its session settings (CatalogSettings).
    val options = LanceCompactException.userErrors(
      CatalogSettings.resolve(name, sessionOptions, Option(SparkEnv.get).map(_.conf), getClass.getName))
    val root = Option(options.get("warehouse")).map(_.trim).filter(_.nonEmpty)
    storage = options.asCaseSensitiveMap().asScala.collect {
      case (k, v) if k.toLowerCase.startsWith("storage.") => k.substring("storage.".length) -> v
    }.toMap
    LanceNamespaceService.refuseReserved(name, storage)
    service = None
    warehouseRef = Option(options.get("impl")).map(_.trim).filter(_.nonEmpty) match {
      case Some(given) if LanceNamespaceService.Impls.contains(given.toLowerCase) || CatalogSettings.classPathImpl(given) =>
        // A catalog service is the operator's to name: its client runs in the driver's engine (a
        // class path is imported there and on the executors).
        if (!CatalogSettings.operators(Option(SparkEnv.get).map(_.conf), name, getClass.getName)) throw new LanceCompactException(
          s"catalog $name: impl '$given' (a catalog service) is accepted only in a catalog the operator registers in the " +
            "driver's static configuration, not in one a session defines", null)
        val impl = if (CatalogSettings.classPathImpl(given)) given else given.toLowerCase
        val props = LanceNamespaceService.properties(impl, options.asCaseSensitiveMap().asScala.toMap)
        LanceNamespaceService.check(name, impl, options.asCaseSensitiveMap().asScala.toMap, props)
        val s = new LanceNamespaceService(name, impl, props, storage)
        service = Some(s)
        s
      case Some(impl) =>
        LanceDirectoryNamespace.check(name, impl)
        val nsRoot = Option(options.get("root")).orElse(root).map(_.trim).filter(_.nonEmpty).getOrElse(
          throw new IllegalArgumentException(s"catalog $name: impl=dir needs spark.sql.catalog.$name.root"))
        new LanceDirectoryNamespace(name, nsRoot, storage,
          Option(options.get("single_level_ns")).exists(_.trim.toBoolean))
      case None => new Warehouse(name, root, new ObjectStore(storage, root.map(WarehouseBoundary.normalise)))
    }
    maintain = options.asCaseSensitiveMap().asScala.collect {
      case (k, v) if k.toLowerCase.startsWith("maintain.") => k.substring("maintain.".length) -> v
    }.toMap
    readMaxRows = Option(options.get("read_max_rows")).map(_.trim.toLong).getOrElse(readMaxRows)
    distributedReads = Option(options.get("distributed_reads")).map(_.trim.toBoolean).getOrElse(true)
    SparkSession.getActiveSession.foreach { spark =>
      val shown = storage.keys.filter(k => sessionOptions.containsKey(s"storage.$k"))
        .filterNot(k => EnginePlugin.redacts(spark.sparkContext.getConf, name, k))
      if (shown.nonEmpty) logWarning(s"catalog $name: Spark does not redact storage options " +
        s"${Names.show(shown.toSeq.sorted.mkString(", "))} in its event log and UI; set spark.plugins=${classOf[EnginePlugin].getName} " +
        s"or add ${EnginePlugin.StorageOptions} to ${EnginePlugin.RedactionKey}")
    }
    // The catalog is initialized when a statement first names it: start the engine now,
    // in the background, so the statement's procedure call finds it (nearly) ready.
    SparkSession.getActiveSession.foreach(EnginePool.warmUp)
  }

  override def name(): String = catalogName

  /** Lance storage options from the catalog's `storage.*` settings (with a catalog service,
   * also the service: [[LanceNamespaceService]]). */
  def storageOptions: Map[String, String] = service.map(_.storageOptions).getOrElse(storage)

  /** The storage options of one table (with a catalog service, its identifier too). */
  def tableStorage(id: Seq[String]): Map[String, String] = service.map(_.tableStorage(id)).getOrElse(storage)

  /** The warehouse (or directory namespace root) in normal form, which every engine request
   * carries: the engine refuses to open a location outside it. */
  def warehouseRoot: Option[String] = warehouseRef.boundaryRoot

  /** Maintenance policy defaults from the catalog's `maintain.*` settings (key without the
   * prefix -> text), checked by the engine (python/lance_compact/policy.py). */
  def maintainSettings: Map[String, String] = maintain

  /** Every table under `namespace` (all of the warehouse when None), nested namespaces
   * included: (namespace, table, location), as lance.system.table_health lists them. */
  def tablesUnder(namespace: Option[String]): Seq[(String, String, String)] = listUnder(namespace)._1

  /** [[tablesUnder]], with how many namespaces were listed: only `namespace`'s folders. */
  def listUnder(namespace: Option[String]): (Seq[(String, String, String)], Int) = {
    namespace.foreach(Names.checkText(catalogName, "namespace", _))
    val start: Array[String] = namespace.map { n =>
      val parts = try CatalystSqlParser.parseMultipartIdentifier(n.trim) catch {
        case e: ParseException => throw new IllegalArgumentException(
          s"namespace '$n' is not a namespace name: ${e.getMessage.linesIterator.next()}")
      }
      val local = if (parts.length > 1 && parts.head.equalsIgnoreCase(catalogName)) parts.tail else parts
      if (!warehouseRef.namespaceExists(local.toArray)) throw new NoSuchNamespaceException(local.toArray)
      local.toArray
    }.getOrElse(Array.empty)
    val listed = warehouseRef.tablesUnder(start)
    (listed.tables.collect {
      case (ns, t, location) if ns.startsWith(start) => (ns.mkString("."), t, location)
    }.sortBy { case (ns, t, _) => s"$ns.$t" }, listed.listings)
  }

  /** The location of a table argument: `namespace.table` of this catalog (optionally
   * prefixed with the catalog's name), or a path/URI inside the warehouse.
   */
  def resolveTable(table: String): String = resolve(table)._1

  /** [[resolveTable]], with the storage options of that table. */
  def resolve(table: String): (String, Map[String, String]) = {
    Names.checkText(catalogName, "table", table)
    val arg = table.trim
    if (arg.isEmpty) throw new IllegalArgumentException("parameter table must not be empty")
    if (arg.contains('/') || arg.contains('\\')) service match {
      case Some(s) =>
        val (ident, location) = s.tableAt(arg)
        (location, s.tableStorage(ident.namespace.toSeq :+ ident.name))
      case None => (warehouseRef.checkPath(arg), storage)
    }
    else {
      val parts = try CatalystSqlParser.parseMultipartIdentifier(arg) catch {
        case e: ParseException => throw new IllegalArgumentException(
          s"table '$arg' is neither an identifier (namespace.table) nor a path: ${e.getMessage.linesIterator.next()}")
      }
      val local = if (parts.length > 2 && parts.head.equalsIgnoreCase(catalogName)) parts.tail else parts
      if (local.length < 2) throw new IllegalArgumentException(
        s"table '$arg' needs a namespace: write <namespace>.<table>, for example db.events")
      // requireTable checks the location against the warehouse's boundary (real paths).
      (warehouseRef.requireTable(Identifier.of(local.init.toArray, local.last)), tableStorage(local))
    }
  }

  // ---- namespaces: folders of the warehouse ----

  override def listNamespaces(): Array[Array[String]] = warehouseRef.listNamespaces(Array.empty)

  override def listNamespaces(namespace: Array[String]): Array[Array[String]] = userErrors(namespace.toSeq) {
    warehouseRef.listNamespaces(namespace)
  }

  /** Every entry point that takes an identifier: control characters are refused before anything
   * logs the name or names a job with it; IllegalArgumentExceptions become user errors. */
  private def userErrors[T](parts: Seq[String], what: String = "namespace")(body: => T): T =
    LanceCompactException.userErrors {
      Names.checkIdentifier(catalogName, what, parts)
      body
    }

  private def userErrors[T](ident: Identifier)(body: => T): T =
    userErrors(ident.namespace.toSeq :+ ident.name, "table")(body)

  override def namespaceExists(namespace: Array[String]): Boolean = userErrors(namespace.toSeq) {
    warehouseRef.namespaceExists(namespace)
  }

  override def loadNamespaceMetadata(namespace: Array[String]): util.Map[String, String] = userErrors(namespace.toSeq) {
    if (namespace.isEmpty || !warehouseRef.namespaceExists(namespace)) throw new NoSuchNamespaceException(namespace)
    util.Map.of("location", warehouseRef.namespaceLocation(namespace))
  }

  override def createNamespace(namespace: Array[String], metadata: util.Map[String, String]): Unit =
    userErrors(namespace.toSeq) {
      Names.checkNewNamespace(catalogName, namespace.toSeq)
      warehouseRef.createNamespace(namespace)
    }

  override def alterNamespace(namespace: Array[String], changes: NamespaceChange*): Unit =
    throw new UnsupportedOperationException(s"catalog $catalogName: namespaces have no properties to alter")

  override def dropNamespace(namespace: Array[String], cascade: Boolean): Boolean = userErrors(namespace.toSeq) {
    warehouseRef.dropNamespace(namespace, cascade)
  }

  // ---- tables: <name>.lance datasets ----

  override def listTables(namespace: Array[String]): Array[Identifier] = userErrors(namespace.toSeq) {
    warehouseRef.listTables(namespace)
  }

  private def ref(ident: Identifier, location: String, version: Option[Long] = None) =
    TableRef(s"$catalogName.${(ident.namespace :+ ident.name).mkString(".")}", location,
      tableStorage(ident.namespace.toSeq :+ ident.name), version, readMaxRows,
      distributedReads, warehouseRoot)

  /** A table `ns.t`, a metadata table `ns.t.fragments` (`versions`, `indices`) of table `ns.t`,
   * or a system table `system.table_health` / `system.maintenance_history` (these two names
   * win over tables of a warehouse namespace `system`; its other tables are reachable). */
  override def loadTable(ident: Identifier): Table = userErrors(ident) {
    if (ident.namespace.isEmpty) throw new NoSuchTableException(ident)
    if (ident.namespace.toSeq == Seq(SystemTable.Namespace) && SystemTable.Kinds.contains(ident.name)) {
      return new SystemTable(catalogName, ident.name,
        // a pushed namespace filter: only those namespaces are listed
        (namespaces: Option[Set[String]]) => namespaces.map(warehouseRef.tablesOf)
          .getOrElse(warehouseRef.tablesUnder(Array.empty)), storageOptions, maintain, warehouseRoot)
    }
    metadataOf(ident).getOrElse(new LanceTable(ref(ident, warehouseRef.requireTable(ident)), Some((this, ident))))
  }

  /** `SELECT ... FROM lance.db.t VERSION AS OF 12`: the table at that Lance version (numbered
   * from 1; one the table does not have is refused by the engine, naming the latest). */
  override def loadTable(ident: Identifier, version: String): Table = userErrors(ident) {
    val name = s"$catalogName.${(ident.namespace :+ ident.name).mkString(".")}"
    val v = scala.util.Try(version.trim.toLong).toOption.filter(_ >= 1).getOrElse(throw new IllegalArgumentException(
      s"table $name: VERSION AS OF '${Names.show(version)}' is not a version of the table: Lance numbers a table's " +
        s"versions 1, 2, 3, ... (SELECT version, timestamp FROM $name.versions lists them)"))
    if (ident.namespace.isEmpty) throw new NoSuchTableException(ident)
    new LanceTable(ref(ident, warehouseRef.requireTable(ident), Some(v)))
  }

  /** `TIMESTAMP AS OF` is not served: a clear refusal naming the table and the moment (Spark's
   * default would say the table does not exist). */
  override def loadTable(ident: Identifier, timestamp: Long): Table = userErrors(ident) {
    val name = s"$catalogName.${(ident.namespace :+ ident.name).mkString(".")}"
    val moment = java.time.Instant.ofEpochSecond(Math.floorDiv(timestamp, 1000000L), Math.floorMod(timestamp, 1000000L) * 1000)
    throw new IllegalArgumentException(
      s"table $name: TIMESTAMP AS OF $moment is not supported by catalog $catalogName; read a version with " +
        s"VERSION AS OF <n> (SELECT version, timestamp FROM $name.versions gives each version's time)")
  }

  private def metadataOf(ident: Identifier): Option[Table] = {
    if (ident.namespace.length < 2 || !MetadataTable.Kinds.contains(ident.name)) return None
    val table = Identifier.of(ident.namespace.init, ident.namespace.last)
    if (warehouseRef.namespaceExists(ident.namespace)) None
    else warehouseRef.findTable(table).map(location => new MetadataTable(ref(table, location), ident.name))
  }

  private def writesElsewhere(what: String): Nothing = throw new UnsupportedOperationException(
    s"catalog $catalogName does not $what tables: write Lance datasets with Lance (pylance) or lance-spark; this catalog maintains and reads them")

  override def createTable(ident: Identifier, schema: StructType, partitions: Array[Transform],
                           properties: util.Map[String, String]): Table = writesElsewhere("create")

  /** `ALTER TABLE ... SET / UNSET TBLPROPERTIES`: the table's maintenance settings
   * (`lance_compact.maintain.*`, `lance.compaction.*`, `lance_compact.cluster_by`), written into
   * the Lance table's config in one commit by the engine, which checks every key and value first;
   * `ALTER TABLE ... CLUSTER BY (a, b) | NONE` sets or removes `lance_compact.cluster_by`. Nothing else. */
  override def alterTable(ident: Identifier, changes: TableChange*): Table = userErrors(ident) {
    val other = changes.filterNot(c => c.isInstanceOf[TableChange.SetProperty] ||
      c.isInstanceOf[TableChange.RemoveProperty] || c.isInstanceOf[TableChange.ClusterBy])
    if (other.nonEmpty) throw new UnsupportedOperationException(
      s"catalog $catalogName: ALTER TABLE only sets or unsets the table's maintenance properties here " +
        s"(lance_compact.maintain.*, lance.compaction.*, lance_compact.cluster_by) or its clustering (CLUSTER BY); " +
        s"${other.map(_.getClass.getSimpleName).distinct.mkString(", ")} " +
        "is not supported: change a table's schema or location with Lance (pylance) or lance-spark")
    val location = warehouseRef.requireTable(ident)
    val request = ref(ident, location).request { r =>
      val set = r.putObject("set")
      val unset = r.putArray("unset")
      changes.foreach {
        case s: TableChange.SetProperty => set.put(s.property, s.value)
        case u: TableChange.RemoveProperty => unset.add(u.property)
        // CLUSTER BY (a, b) / CLUSTER BY NONE: the engine turns the columns (each a field path)
        // into the lance_compact.cluster_by property, checked against the schema; none: []
        case c: TableChange.ClusterBy =>
          val columns = r.putArray("cluster_by")
          c.clusteringColumns.foreach(ref => ref.fieldNames.foldLeft(columns.addArray())((a, n) => a.add(n)))
        case _ =>
      }
    }
    PythonEngine.query("alter_properties", request)
    new LanceTable(ref(ident, location))
  }

  override def dropTable(ident: Identifier): Boolean = writesElsewhere("drop")

  override def renameTable(oldIdent: Identifier, newIdent: Identifier): Unit = writesElsewhere("rename")

  // ---- procedures: lance.<name> and lance.system.<name> ----

  override def loadProcedure(ident: Identifier): UnboundProcedure = userErrors(ident.namespace.toSeq :+ ident.name, "procedure") {
    val ns = ident.namespace.toSeq
    if (ns.nonEmpty && ns != Seq(Procedures.SystemNamespace)) {
      throw new IllegalArgumentException(
        s"catalog $catalogName has no procedure ${(ns :+ ident.name).mkString(".")}; " +
          s"procedures are ${Procedures.names.mkString(", ")} (also under ${Procedures.SystemNamespace}.)")
    }
    Procedures.load(this, ident.name)
  }

  // No `override`: Spark 4.1 added this method, 4.0 lacks it; one source serves both.
  def listProcedures(namespace: Array[String]): Array[Identifier] =
    Procedures.names.map(n => Identifier.of(namespace, n)).toArray
}

package io.github.lancecompact.spark.guard

import java.util.{IdentityHashMap, Locale}

import scala.jdk.CollectionConverters._

import org.apache.spark.sql.catalyst.expressions.{Expression, RuntimeReplaceable, UserDefinedExpression}
import org.apache.spark.sql.catalyst.plans.logical.{AnalysisOnlyCommand, Command, LogicalPlan}
import org.apache.spark.sql.connector.catalog.CatalogPlugin
import org.apache.spark.sql.execution.command.SetCommand
import org.apache.spark.sql.execution.datasources.{HadoopFsRelation, LogicalRelation}
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation
import org.apache.spark.sql.sources.{BaseRelation, DataSourceRegister}

/** The guard's check of an analyzed plan (a check rule: it runs before a command or query runs).
 * Every node of the plan is visited, the queries of views, subqueries and commands' own
 * queries included, and refused unless the [[GuardPolicy]] allows it:
 *
 *  - a command, or a plan operation that runs a statement's code (a script, Python, R or JVM
 *    functions), by its class name (`allowCommands`);
 *  - a relation read by data source rather than from a catalog table, a streaming relation, and
 *    the data source a created table or temporary view names (`allowSources`);
 *  - a catalog that is not in the operator's static configuration (a session defines none);
 *  - a user-defined function by its name, and an expression of a refused built-in function
 *    (reflection, say) however it was reached (`allowFunctions`);
 *  - a `SET` of a catalog's key, of the guard's own settings, or one lifting redaction;
 *  - a location or path of the statement's choosing, and a global temporary view.
 *
 * Spark's built-in functions are refused earlier, at name resolution ([[RefusedFunctions]]). */
final class GuardCheck(policy: GuardPolicy) extends (LogicalPlan => Unit) {
  import GuardCheck._

  private val refusedClasses = RefusedFunctions.refusedClasses(policy)

  override def apply(plan: LogicalPlan): Unit = {
    val seen = new IdentityHashMap[LogicalPlan, java.lang.Boolean]()
    def visit(p: LogicalPlan): Unit = if (seen.put(p, true) == null) {
      check(p)
      inner(p).foreach(visit)
    }
    visit(plan)
  }

  /** A node's plans: children, inner children (a view's or a cached query's plan), the plans
   * of its subqueries, and an analysis-only command's query (its children once analyzed). */
  private def inner(p: LogicalPlan): Seq[LogicalPlan] = {
    val analysisOnly = p match {
      case c: AnalysisOnlyCommand => c.childrenToAnalyze
      case _ => Nil
    }
    p.children ++ p.innerChildren.collect { case l: LogicalPlan => l } ++ p.subqueries ++ analysisOnly
  }

  private def check(node: LogicalPlan): Unit = {
    val name = simple(node)
    node match {
      case _: Command if !policy.allowsCommand(name) =>
        throw Refusal(s"the command $name", "it is not among the commands the operator allows",
          Some(GuardPolicy.CommandsKey -> name))
      case _ if CodeOperations.contains(name) && !policy.allowsCommand(name) =>
        throw Refusal(s"the operation $name", "it runs code a statement brings (a script, or Python, R or JVM " +
          "functions)", Some(GuardPolicy.CommandsKey -> name))
      case _ =>
    }
    catalogsOf(node).foreach { c =>
      if (!policy.isOperatorCatalog(c.name()) && !SparksOwnCatalogs(c.getClass.getName)) throw Refusal(s"the catalog ${c.name()}",
        "it is not one of the operator's catalogs (a catalog is defined in the server's static configuration, " +
          s"spark.sql.catalog.${Refusal.shown(c.name())}=...; a session defines none)")
    }
    sourceOf(node).foreach { names =>
      if (!policy.allowsSource(names)) throw Refusal(s"the data source ${names.head}",
        "a statement reads only tables of the operator's catalogs, and data sources the operator allows",
        Some(GuardPolicy.SourcesKey -> names.head))
    }
    if (!targetsOnlyOtherCatalogs(node)) providersOf(node).foreach { provider =>
      val names = providerNames(provider)
      if (!policy.allowsSource(names)) throw Refusal(s"the data source $provider",
        "it is not among the data sources the operator allows (in the session catalog, a table's data source " +
          "is opened by Spark itself)", Some(GuardPolicy.SourcesKey -> names.head))
    }
    node match {
      case s: SetCommand => s.kv match {
        case Some((key, Some(value))) => checkSet(key, value)
        case _ =>
      }
      case _ =>
    }
    if (name == "InsertIntoDir") throw Refusal("writing to a directory", "it writes files where a statement says")
    if (isGlobalTempView(node, name)) {
      throw Refusal("a global temporary view", "every session could read and replace it")
    }
    // a temporary view over a data source the operator allowed reads where its options say: that
    // source's paths are what the operator allowed (its name was checked above)
    if ((name.startsWith("Create") || name.startsWith("Replace")) && name != "CreateTempViewUsing") locationOf(node).foreach { l =>
      throw Refusal(s"a LOCATION or path of a statement's choosing ($l)", "it would write or read files there")
    }
    // `ALTER TABLE t ADD PARTITION (k=1) LOCATION '<folder>'` pointed a table of the session catalog
    // at any folder: its reads read it, INSERT OVERWRITE of the partition emptied and wrote it,
    // DROP PARTITION ... PURGE removed it
    if (AddsPartitions(name)) partitionLocations(node).headOption.foreach { l =>
      throw Refusal(s"a partition LOCATION of a statement's choosing ($l)", "it would read, write or remove files there")
    }
    node.expressions.foreach(checkExpression)
  }

  /** An expression and everything under it. Inside an allowed function that Spark replaces by
   * others (`try_reflect` by `reflect`'s expression, `nvl` by `coalesce`), the replacement's own
   * classes are that function's, not refused ones; user-defined functions are refused anywhere. */
  private def checkExpression(root: Expression): Unit = {
    def visit(e: Expression, inAllowedReplacement: Boolean): Unit = {
      e match {
        case _ if !inAllowedReplacement && refusedClasses.contains(e.getClass.getName) =>
          throw RefusedFunctions.refusal(refusedClasses(e.getClass.getName))
        case u: UserDefinedExpression if !policy.allowsFunction(u.name) =>
          throw Refusal(s"the user-defined function ${u.name}", "it runs code on the server (a Python, Scala, " +
            "Java or Hive function)", Some(GuardPolicy.FunctionsKey -> u.name))
        case _ if placeOptions(e).nonEmpty =>
          val key = placeOptions(e).head
          throw Refusal(s"the option $key of ${Option(e.prettyName).getOrElse(simple(e))}",
            "it names a file or URL the server would open (from_xml's rowValidationXSDPath fetched an XML schema " +
              "from any host and parsed it with its external entities: any file of the server in an error)")
        case _ if isHiveFunction(simple(e)) && !policy.allowsFunction(nameOf(e).getOrElse(simple(e))) =>
          val n = nameOf(e).getOrElse(simple(e))
          throw Refusal(s"the Hive function $n", "a Hive function's class runs on the driver",
            Some(GuardPolicy.FunctionsKey -> n))
        case _ =>
      }
      val replaced = inAllowedReplacement || e.isInstanceOf[RuntimeReplaceable]
      e.children.foreach(visit(_, replaced))
    }
    visit(root, inAllowedReplacement = false)
  }

  private def checkSet(key: String, value: String): Unit = {
    val k = key.toLowerCase(Locale.ROOT)
    if (k == RejectsCoreConfs || k.contains("redaction")) {
      throw Refusal(s"SET $key", "it would lift the redaction of secrets")
    }
    if (k.startsWith("spark.lance.compact.")) {
      throw Refusal(s"SET $key", "the product's settings are read from the driver's static configuration only")
    }
    if (k.startsWith("spark.sql.catalog.")) {
      val operators = policy.staticConf.collectFirst { case (sk, v) if sk.toLowerCase(Locale.ROOT) == k => v }
      if (!operators.contains(value)) throw Refusal(s"SET $key",
        "catalogs are the operator's: a session defines none and changes none of their settings")
    }
  }

  /** The data source names a relation node was read with, when it was not read from a table of
   * a catalog (first the name an operator would allow); None for every other node. */
  private def sourceOf(node: LogicalPlan): Option[Seq[String]] = node match {
    case r: LogicalRelation if r.catalogTable.isEmpty => Some(relationNames(r.relation))
    case r: DataSourceV2Relation if r.catalog.isEmpty || r.identifier.isEmpty =>
      Some(tableNames(r.table))
    case _ if simple(node).startsWith("Streaming") && node.children.isEmpty =>
      val named = field(node, "sourceName").collect { case s: String => s } ++
        field(node, "dataSource").flatMap(d => field(d, "className")).collect { case s: String => s }
      val catalogTable = field(node, "catalog").exists { case Some(_) => true; case _ => false } &&
        field(node, "identifier").exists { case Some(_) => true; case _ => false }
      if (catalogTable) None else Some(named.toSeq :+ simple(node))
    case _ => None
  }
}

object GuardCheck {
  /** Session settings whose change lifts redaction (key in lower case). */
  private[guard] val RejectsCoreConfs = "spark.sql.legacy.setcommandrejectssparkcoreconfs"
  /** The commands that add partitions, each perhaps at a location of its own. */
  private val AddsPartitions: Set[String] = Set("AddPartitions", "AlterTableAddPartitionCommand")

  /** The locations an ADD PARTITION names: the v1 command's (spec, location) pairs, a v2 partition
   * spec's `location`. */
  private def partitionLocations(node: LogicalPlan): Seq[String] = {
    def in(v: Any): Seq[String] = v match {
      case (_, Some(l: String)) => Seq(l)
      case s: Iterable[_] => s.toSeq.flatMap(in)
      case p: Product if simple(p.asInstanceOf[AnyRef]).contains("PartitionSpec") =>
        field(p, "location").toSeq.flatMap { case Some(l: String) => Seq(l); case _ => Nil }
      case _ => Nil
    }
    node.productIterator.toSeq.flatMap(in)
  }

  /** Spark's own stand-ins for catalogs: a SQL script's local variables (`local`) and the
   * session's variables and built-in functions (`system`), not configurable. */
  private val SparksOwnCatalogs: Set[String] = Set(
    "org.apache.spark.sql.catalyst.analysis.FakeLocalCatalog$", "org.apache.spark.sql.catalyst.analysis.FakeSystemCatalog$")
  /** Plan operations (not commands) that run code a statement or its program brings. */
  val CodeOperations: Set[String] = Set(
    "ScriptTransformation", "HiveScriptTransformation",
    "MapInPandas", "MapInArrow", "PythonMapInArrow", "FlatMapGroupsInPandas", "FlatMapCoGroupsInPandas",
    "FlatMapGroupsInArrow", "FlatMapCoGroupsInArrow", "FlatMapGroupsInPandasWithState", "BatchEvalPython",
    "ArrowEvalPython", "BatchEvalPythonUDTF", "ArrowEvalPythonUDTF", "TransformWithStateInPySpark",
    "TransformWithStateInPandas", "PythonWorkerLogs",
    "FlatMapGroupsInR", "FlatMapGroupsInRWithArrow", "MapPartitionsInR", "MapPartitionsInRWithArrow",
    "MapElements", "MapPartitions", "MapGroups", "CoGroup", "FlatMapGroupsWithState", "TransformWithState",
    "AppendColumns", "AppendColumnsWithObject", "TypedFilter",
    "WriteToStream", "WriteToStreamStatement", "WriteToMicroBatchDataSource", "WriteToMicroBatchDataSourceV1",
    "WriteToDataSourceV2", "WriteToContinuousDataSource")

  private[guard] def simple(o: AnyRef): String = o.getClass.getSimpleName.stripSuffix("$")

  private def isHiveFunction(n: String): Boolean =
    n.startsWith("Hive") && (n.endsWith("UDF") || n.endsWith("UDAF") || n.endsWith("UDTF") || n.endsWith("Function"))

  /** A field of a case class by name (plan nodes differ by Spark version: read by name). */
  private def field(o: Any, name: String): Option[Any] = o match {
    case p: Product => p.productElementNames.zip(p.productIterator).collectFirst { case (`name`, v) => v }
    case _ => None
  }

  /** The options of a function (from_xml, from_json, schema_of_xml...) whose names say they name a
   * place: a path, a URL or a file. */
  private def placeOptions(e: Expression): Seq[String] = field(e, "options").toSeq.flatMap {
    case m: scala.collection.Map[_, _] => m.keys.collect {
      case k: String if Seq("path", "url", "file").exists(k.toLowerCase(Locale.ROOT).contains) => k
    }
    case _ => Nil
  }

  /** A function expression's own name (Hive's `name`), if it has one. */
  private def nameOf(e: Expression): Option[String] = field(e, "name").collect { case s: String => s }

  /** The catalogs a node names in its own fields (a table's, a namespace's, a procedure's). */
  private def catalogsOf(node: LogicalPlan): Seq[CatalogPlugin] = node.productIterator.flatMap {
    case c: CatalogPlugin => Seq(c)
    case Some(c: CatalogPlugin) => Seq(c)
    case _ => Nil
  }.toSeq

  /** A CREATE/REPLACE whose target is a catalog of its own (not Spark's session catalog): the
   * data source it names is only a property that catalog receives, not something Spark opens. */
  private def targetsOnlyOtherCatalogs(node: LogicalPlan): Boolean = {
    val catalogs = (node +: node.children).flatMap(catalogsOf)
    catalogs.nonEmpty && catalogs.forall(_.name() != GuardPolicy.SessionCatalog)
  }

  /** The data sources a CREATE plan node names: its `provider`, or its table description's. */
  private def providersOf(node: LogicalPlan): Seq[String] = {
    def provider(v: Any): Option[String] = v match {
      case s: String if s.nonEmpty => Some(s)
      case Some(s: String) if s.nonEmpty => Some(s)
      case _ => None
    }
    val own = field(node, "provider").flatMap(provider)
    val described = node.productIterator.flatMap {
      case p: Product if Set("CatalogTable", "TableSpec", "UnresolvedTableSpec").contains(simple(p.asInstanceOf[AnyRef])) =>
        field(p, "provider").flatMap(provider)
      case _ => None
    }
    (own.toSeq ++ described).distinct
  }

  /** Registered data sources: class name (lower case) to short name. */
  private lazy val registered: Map[String, String] = {
    val loader = Option(Thread.currentThread().getContextClassLoader).getOrElse(getClass.getClassLoader)
    val it = java.util.ServiceLoader.load(classOf[DataSourceRegister], loader).iterator()
    val out = scala.collection.mutable.Map[String, String]()
    while (it.hasNext) scala.util.Try(it.next()).foreach { d =>
      out(d.getClass.getName.toLowerCase(Locale.ROOT)) = d.shortName()
    }
    out.toMap ++ Map("org.apache.spark.sql.jdbc" -> "jdbc", "org.apache.spark.sql.json" -> "json",
      "org.apache.spark.sql.parquet" -> "parquet", "org.apache.spark.sql.hive.orc" -> "orc",
      "com.databricks.spark.csv" -> "csv", "com.databricks.spark.avro" -> "avro")
  }

  /** The names a provider given in a statement goes by: as written, and the short name of the
   * registered source it names by class. */
  private def providerNames(provider: String): Seq[String] = {
    val p = provider.toLowerCase(Locale.ROOT)
    (Seq(provider) ++ registered.get(p) ++ registered.get(p.stripSuffix(".defaultsource"))).distinct
  }

  /** The names a v1 relation's source goes by: a file format's short name, the package's last
   * segment (`...datasources.jdbc.JDBCRelation` -> `jdbc`), the class names. */
  private def relationNames(r: BaseRelation): Seq[String] = r match {
    case h: HadoopFsRelation => h.fileFormat match {
      case d: DataSourceRegister => Seq(d.shortName(), d.getClass.getName)
      case f => Seq(simple(f), f.getClass.getName)
    }
    case other => Seq(packageName(other), simple(other), other.getClass.getName)
  }

  private def tableNames(t: org.apache.spark.sql.connector.catalog.Table): Seq[String] = {
    val format = field(t, "formatName").orElse(scala.util.Try(t.getClass.getMethod("formatName").invoke(t)).toOption)
      .collect { case s: String => s.toLowerCase(Locale.ROOT) }
    (format.toSeq ++ Seq(scala.util.Try(t.name()).getOrElse(simple(t)), packageName(t), simple(t))).distinct
  }

  private def packageName(o: AnyRef): String = o.getClass.getPackage match {
    case null => simple(o)
    case p => p.getName.split('.').last
  }

  private def isGlobalTempView(node: LogicalPlan, name: String): Boolean =
    name.startsWith("Create") && node.productIterator.exists {
      case v: AnyRef => simple(v) == "GlobalTempView"
      case _ => false
    } || name == "CreateTempViewUsing" && field(node, "global").contains(true)

  /** A location a CREATE plan node was given, read by field name and class name (the nodes differ
   * by version and catalog): a `location`/`path` field, a `location`/`path` property, a table spec's
   * or catalog table's location. Hive tables and CREATE TABLE LIKE carry theirs in a storage format. */
  private def locationOf(node: LogicalPlan): Option[String] = {
    def given(v: Any): Option[String] = v match {
      case Some(x) => given(x)
      case s: String if s.nonEmpty => Some(s)
      case u: java.net.URI => Some(u.toString)
      case _ => None
    }
    def inside(v: Any): Option[String] = v match {
      case m: scala.collection.Map[_, _] => m.collectFirst {
        case (k: String, x) if Set("location", "path").contains(k.toLowerCase(Locale.ROOT)) => given(x)
      }.flatten
      case m: java.util.Map[_, _] => inside(m.asScala)
      case Some(x) => inside(x)
      case p: Product if Set("CatalogTable", "CatalogStorageFormat", "TableSpec", "UnresolvedTableSpec")
        .contains(simple(p.asInstanceOf[AnyRef])) =>
        p.productElementNames.zip(p.productIterator).collectFirst {
          case ("locationUri" | "location", x) if given(x).isDefined => given(x)
          case ("storage" | "properties" | "options", x) if inside(x).isDefined => inside(x)
        }.flatten
      case _ => None
    }
    node.productElementNames.zip(node.productIterator).collectFirst {
      case ("location" | "path", v) if given(v).isDefined => given(v)
      case (_, v) if inside(v).isDefined => inside(v)
    }.flatten
  }
}

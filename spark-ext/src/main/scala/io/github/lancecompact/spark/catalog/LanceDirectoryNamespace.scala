package io.github.lancecompact.spark.catalog

import io.github.lancecompact.spark.engine.{EngineRequest, LanceCompactException}

/** A warehouse laid out by a Lance directory namespace, the layout lance-spark's
 * `impl=dir` catalog writes under its `root`, resolved by Lance itself
 * (`lance.namespace.DirectoryNamespace`, in the engine; see `lance_compact/namespaces.py`).
 * With `singleLevel` (lance-spark's `single_level_ns=true`) the tables `<root>/<t>.lance`
 * are in the one virtual namespace `default`; otherwise namespaces and tables are those of
 * the root's `__manifest`. Both catalogs name a table the same: `<catalog>.db.events`.
 */
final class LanceDirectoryNamespace(catalogName: String, root: String, storage: Map[String, String],
                                    singleLevel: Boolean) extends EngineNamespaces(catalogName) {
  // Paths given as table arguments, and the locations Lance's manifest gives for tables, are
  // bounded by the root as in our own layout (one boundary: the Warehouse's).
  private val bounds = new Warehouse(catalogName, Some(root))

  override def boundaryRoot: Option[String] = bounds.boundaryRoot

  protected def request(op: String, id: Seq[String]): String =
    EngineRequest(storage = storage, warehouse = boundaryRoot) { r =>
      // Lance gets the root in normal form, as the boundary checks it
      r.put("op", op).put("root", boundaryRoot.getOrElse(root)).put("single_level", singleLevel)
      val ids = r.putArray("id")
      id.foreach(ids.add)
    }

  def namespaceLocation(namespace: Array[String]): String = root

  protected def checkedLocation(location: String): String = bounds.checkPath(location)

  def checkPath(path: String): String = bounds.checkPath(path)
}

object LanceDirectoryNamespace {
  /** The catalog's `impl` setting: only Lance's directory namespace is read here. */
  def check(catalogName: String, impl: String): Unit =
    if (!impl.trim.equalsIgnoreCase("dir")) throw new LanceCompactException(
      s"catalog $catalogName: impl '$impl' is not supported; impl=dir (a Lance directory namespace, " +
        "as lance-spark writes it, with root=<folder or URI>), impl=rest (a Lance REST namespace, with " +
        "uri=<endpoint>), impl=glue (AWS Glue) and impl=hive2|hive3 (a Hive Metastore, with uri=thrift://host:port " +
        "and root=<folder or URI>) are, or leave impl unset and set warehouse", null)
}

package io.github.lancecompact.spark.catalog

import org.apache.spark.sql.catalyst.analysis.{NoSuchNamespaceException, NoSuchTableException}
import org.apache.spark.sql.connector.catalog.Identifier

/** Where a catalog finds its namespaces and tables: our own warehouse layout ([[Warehouse]]:
 * namespaces are folders, tables `<name>.lance`) or a Lance directory namespace, as
 * lance-spark's `impl=dir` catalog lays it out ([[LanceDirectoryNamespace]]).
 */
trait TableDirectory {
  def namespaceExists(namespace: Array[String]): Boolean
  def namespaceLocation(namespace: Array[String]): String
  def listNamespaces(namespace: Array[String]): Array[Array[String]]
  def listTables(namespace: Array[String]): Array[Identifier]
  def createNamespace(namespace: Array[String]): Unit
  def dropNamespace(namespace: Array[String], cascade: Boolean): Boolean

  /** The table's location, if it exists. */
  def findTable(ident: Identifier): Option[String]

  /** The table's location; Spark's own errors when the namespace or table does not exist. */
  def requireTable(ident: Identifier): String = findTable(ident).getOrElse {
    if (!namespaceExists(ident.namespace)) throw new NoSuchNamespaceException(ident.namespace)
    throw new NoSuchTableException(ident)
  }

  /** The location of a table [[listTables]] just listed (no second existence check where
   * the layout names it). */
  def listedLocation(ident: Identifier): Option[String] = findTable(ident)

  /** A namespace's tables (none at the root) and child namespaces, for a walk of namespaces
   * just listed (or checked to exist); a layout that can answer both from one listing says so. */
  protected def children(ns: Array[String]): (Seq[Identifier], Seq[Array[String]]) =
    (if (ns.isEmpty) Seq.empty else listTables(ns).toSeq, listNamespaces(ns).toSeq)

  /** Tables of the namespaces `keep` selects, from `ns` down through the namespaces `into`
   * selects (so a narrowed walk lists only the folders on its way); with how many namespaces
   * were listed. */
  private def walk(ns: Array[String], keep: Array[String] => Boolean, into: Array[String] => Boolean): Listed = {
    val (tables, namespaces) = children(ns)
    val here = if (ns.nonEmpty && keep(ns)) tables.flatMap(id => listedLocation(id).map(l => (ns, id.name, l))) else Nil
    namespaces.filter(into).map(walk(_, keep, into)).foldLeft(Listed(here, 1))((a, b) =>
      Listed(a.tables ++ b.tables, a.listings + b.listings))
  }

  /** Every table under `under` (the whole warehouse when empty), nested namespaces included:
   * (namespace, table, location); only `under`'s folders are listed. */
  def allTables(under: Array[String] = Array.empty): Seq[(Array[String], String, String)] = tablesUnder(under).tables

  /** [[allTables]], with how many namespaces were listed. */
  def tablesUnder(under: Array[String]): Listed = walk(under, _ => true, _ => true)

  /** The tables of the namespaces named (dotted, as system tables show them; nested ones not
   * included), walking only into namespaces on the way to one of them: a system table's
   * `WHERE namespace = 'ns0'` lists the root and ns0, not the whole warehouse. */
  def tablesOf(namespaces: Set[String]): Listed = {
    def dotted(ns: Array[String]) = ns.mkString(".")
    walk(Array.empty, ns => namespaces.contains(dotted(ns)),
         ns => namespaces.exists(n => n == dotted(ns) || n.startsWith(dotted(ns) + ".")))
  }

  /** A path or URI a user gave as a table, checked to lie inside the catalog's root. */
  def checkPath(path: String): String

  /** The root every location lies in, as locations in it are written (normal form), if any:
   * sent with every engine request, whose engine checks the location it opens against it. */
  def boundaryRoot: Option[String]
}

/** Tables a walk of a [[TableDirectory]] found, (namespace, table, location), and how many
 * namespaces (folders) it listed. */
final case class Listed(tables: Seq[(Array[String], String, String)], listings: Int)

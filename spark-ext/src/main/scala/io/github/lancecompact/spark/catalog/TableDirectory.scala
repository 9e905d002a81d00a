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

  /** Every table in every namespace (nested ones included): (namespace, table, location). */
  def allTables(): Seq[(Array[String], String, String)] = {
    def walk(ns: Array[String]): Seq[(Array[String], String, String)] =
      (if (ns.isEmpty) Seq.empty
       else listTables(ns).toSeq.flatMap(id => listedLocation(id).map(l => (ns, id.name, l)))) ++
        listNamespaces(ns).toSeq.flatMap(walk)
    walk(Array.empty)
  }

  /** A path or URI a user gave as a table, checked to lie inside the catalog's root. */
  def checkPath(path: String): String
}

package org.apache.spark.sql.execution.datasources.v2.python

import org.apache.spark.api.python.PythonUtils
import org.apache.spark.sql.types.StructType
import org.apache.spark.sql.util.CaseInsensitiveStringMap

/** The catalog's distributed read (FragmentScan.scala) as a Spark Python data source that no
 * name reaches: Spark registers a Python data source by name (a `pyspark_*` module's
 * `DefaultSource`, or `spark.dataSource.register`), and every registered name can be given by
 * any SQL user (`CREATE TEMPORARY VIEW v USING <name> OPTIONS (...)`, `spark.read.format`), with
 * options of the user's choosing: the engine's read request, which says what table to open,
 * where, with which storage options. So this source is registered nowhere: only the catalog's
 * scan builds one, with the request it made itself from a table the catalog resolved inside
 * its warehouse and with its credential rule applied (TableRef.scala, CatalogSettings.scala).
 *
 * It is a `PythonDataSourceV2` whose Python class (`lance_compact.catalog.read_source.
 * LanceFragmentSource`, pickled by reference) is given here instead of looked up by name; that
 * lookup is the `source` of Spark 4.0-4.3's class, `private[python]`, hence this package. The
 * constructor takes the class; the one without arguments, which Spark calls for `USING <this
 * class>`, refuses. Spark's own machinery runs it as any Python data source: `reader()`/
 * `partitions()` in a Python worker on the driver, `read()` on executors.
 */
final class LanceCompactReadSource private (pythonSource: UserDefinedPythonDataSource) extends PythonDataSourceV2 {
  /** What Spark calls for `USING <this class>` (or `format(...)`): refused. */
  def this() = this(LanceCompactReadSource.refused())

  override private[python] lazy val source: UserDefinedPythonDataSource = pythonSource

  /** Creates the Python data source now (a Python worker on the driver; Spark keeps the result
   * for the scan's planning), so that a driver whose Python cannot import it fails here. */
  def prepare(options: CaseInsensitiveStringMap, schema: StructType): Unit =
    getOrCreateDataSourceInPython(LanceCompactReadSource.Name, options, Some(schema))
}

object LanceCompactReadSource {
  /** `LanceFragmentSource.name()`: Spark's Python worker checks the two agree. */
  val Name = "lance_compact_read"
  private val PythonModule = "lance_compact.catalog.read_source"
  private val PythonClass = "LanceFragmentSource"

  // The class by reference, as pickle protocol 0 writes it (GLOBAL, STOP): what Spark's worker
  // unpickles is an import of the module, never code carried in the bytes.
  private lazy val python: UserDefinedPythonDataSource = UserDefinedPythonDataSource(
    PythonUtils.createPythonFunction(s"c$PythonModule\n$PythonClass\n.".getBytes("US-ASCII")))

  private def refused(): UserDefinedPythonDataSource = throw new UnsupportedOperationException(
    "the lance catalog's distributed read cannot be named in SQL or as a data source format: read " +
      "a table through its catalog (SELECT ... FROM <catalog>.<namespace>.<table>)")

  /** A new provider for one scan (Spark keeps per-scan state in it). */
  def apply(): LanceCompactReadSource = {
    val provider = new LanceCompactReadSource(python)
    provider.setShortName(Name)
    provider
  }
}

package io.github.lancecompact.spark.catalog

/** What a namespace or table name may be. Any identifier or table argument a SQL user gives is
 * checked for control characters before anything logs it or names a job with it (a newline
 * would forge lines in logs and job descriptions); names of new namespaces must not collide
 * with Lance's own layout (a `<t>.lance` table folder, its `_versions`, `_indices`, ... folders).
 */
object Names {
  private def control(c: Char): Boolean = c < 0x20 || c == 0x7f

  /** `s` with its control characters written out (`\n`, `\u0001`), safe for a message. */
  def show(s: String): String = s.flatMap {
    case '\n' => "\\n"
    case '\r' => "\\r"
    case '\t' => "\\t"
    case c if control(c) => f"\\u${c.toInt}%04x"
    case c => c.toString
  }

  /** Refuse `value` (a name, an identifier or a table argument) if it holds a control character. */
  def checkText(catalogName: String, what: String, value: String): Unit =
    if (value.exists(control)) throw new IllegalArgumentException(
      s"catalog $catalogName: $what '${show(value)}' contains a control character (newline, tab, ...); " +
        "names and table arguments may not")

  def checkIdentifier(catalogName: String, what: String, parts: Seq[String]): Unit =
    if (parts.exists(_.exists(control))) checkText(catalogName, what, parts.mkString("."))

  /** A new namespace's name: neither a table folder (`x.lance`) nor one of Lance's or hidden folders
   * (`_versions`, `_indices`, `.x`), so it can never be created inside a table or hide one. */
  def checkNewNamespace(catalogName: String, namespace: Seq[String]): Unit = {
    checkIdentifier(catalogName, "namespace", namespace)
    namespace.find(layoutName).foreach { part =>
      throw new IllegalArgumentException(
        s"catalog $catalogName: namespace ${namespace.mkString(".")} is refused: '$part' collides with Lance's " +
          s"layout (names ending in ${Warehouse.TableSuffix} are tables, names starting with '_' or '.' are Lance's " +
          "own or hidden folders)")
    }
  }

  /** A name Lance's layout uses for a table folder or its internal or hidden folders. */
  def layoutName(part: String): Boolean =
    part.toLowerCase.endsWith(Warehouse.TableSuffix) || part.startsWith("_") || part.startsWith(".")
}

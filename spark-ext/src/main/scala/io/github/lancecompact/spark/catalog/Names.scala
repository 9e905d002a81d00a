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

  /** The most bytes (UTF-8) a namespace's or table's folder name may have: NAME_MAX of local file
   * systems (ext4, XFS, btrfs, APFS: 255; Lance fails on a longer one with an I/O error), kept on
   * object stores too, so a warehouse can move between stores. A table's folder is `<name>.lance`. */
  val MaxNameBytes = 255

  /** Refuse a folder name (`folder`: a namespace's name, or `<table>.lance`) longer than [[MaxNameBytes]]. */
  def checkLength(catalogName: String, what: String, folder: String): Unit = {
    val bytes = folder.getBytes(java.nio.charset.StandardCharsets.UTF_8).length
    if (bytes > MaxNameBytes) {
      val suffix = if (what == "table") s" (${MaxNameBytes - Warehouse.TableSuffix.length} for a table name, whose folder adds ${Warehouse.TableSuffix})" else ""
      throw new IllegalArgumentException(
        s"catalog $catalogName: $what name '${show(folder.take(40))}...' is too long: its folder name has $bytes bytes; " +
          s"names may have at most $MaxNameBytes bytes (UTF-8)$suffix, the limit of local file systems")
    }
  }

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

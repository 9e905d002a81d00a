package io.github.lancecompact.spark.catalog

/** What a namespace or table name may be. Any identifier or table argument a SQL user gives is
 * checked before anything logs it or names a job with it: no control character (a newline would
 * forge lines in logs and job descriptions) and no other character that is not printable (the
 * rule of python/lance_compact/runtime/identifiers.py, which checks index and column names);
 * names of new namespaces must not collide with Lance's own layout (a `<t>.lance` table folder,
 * its `_versions`, `_indices`, ... folders).
 */
object Names {
  /** A control character (C0, DEL, C1) or a line or paragraph separator: one that breaks a line. */
  private def control(cp: Int): Boolean = cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || cp == 0x2028 || cp == 0x2029

  /** Not printable: a control character, or a format character (zero-width, bidirectional marks),
   * a lone surrogate, a private-use or an unassigned code point (Unicode Cc, Cf, Zl, Zp, Cs, Co, Cn). */
  private def unprintable(cp: Int): Boolean = control(cp) || (Character.getType(cp) match {
    case Character.FORMAT | Character.SURROGATE | Character.PRIVATE_USE | Character.UNASSIGNED => true
    case _ => false
  })

  private def escaped(cp: Int): String = cp match {
    case '\n' => "\\n"
    case '\r' => "\\r"
    case '\t' => "\\t"
    case c if c > 0xffff => f"\\U$c%08x"
    case c => f"\\u$c%04x"
  }

  /** `s` with its characters that are not printable written out (`\n`, `\u0001`, `\u2028`), safe
   * for a message or a log line. */
  def show(s: String): String = {
    val out = new StringBuilder
    s.codePoints().forEach(cp => if (unprintable(cp)) out ++= escaped(cp) else out.appendAll(Character.toChars(cp)))
    out.toString
  }

  /** Refuse `value` (a name, an identifier or a table argument) if it holds a control character
   * or another character that is not printable. */
  def checkText(catalogName: String, what: String, value: String): Unit = {
    checkControl(catalogName, what, value)
    value.codePoints().filter(unprintable(_)).findFirst().ifPresent { cp =>
      throw new IllegalArgumentException(
        s"catalog $catalogName: $what '${show(value)}' contains a character that is not printable (${escaped(cp)}); " +
          "names and table arguments may not")
    }
  }

  /** Refuse `value` if it holds a control character: the one rule for the name of something that
   * exists (DROP INDEX: an index pylance made with any name may be dropped by its exact name). */
  def checkControl(catalogName: String, what: String, value: String): Unit =
    if (value.codePoints().anyMatch(control(_))) throw new IllegalArgumentException(
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
    if (parts.exists(_.codePoints().anyMatch(unprintable(_)))) checkText(catalogName, what, parts.mkString("."))

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

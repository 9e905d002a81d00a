package io.github.lancecompact.spark.guard

/** The guard's one error: what was refused, why, and the setting that would allow it (if any). */
object Refusal {
  val Guard = "io.github.lancecompact.spark.SharedServerGuard"

  /** A name as a message shows it: unprintable characters escaped as every name is (Names.show),
   * at most 200 characters. */
  def shown(name: String): String = {
    val escaped = io.github.lancecompact.spark.catalog.Names.show(name)
    if (escaped.length > 200) escaped.take(200) + "..." else escaped
  }

  def apply(what: String, why: String, allowedBy: Option[(String, String)] = None): UnsupportedOperationException = {
    val allow = allowedBy.map { case (key, entry) => s"; the operator allows it with $key=${shown(entry)}" }
      .getOrElse("")
    new UnsupportedOperationException(s"${shown(what)} is refused on this server ($Guard): $why$allow")
  }
}

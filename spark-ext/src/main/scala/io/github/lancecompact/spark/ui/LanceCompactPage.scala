package io.github.lancecompact.spark.ui

import scala.xml.Node

import jakarta.servlet.http.HttpServletRequest

/** A page of the Lance tab, as the product renders it (io.github.lancecompact.spark.ui): its
 * path under `/lance/` ("" for the tab's first page), its title, its content; `canModify`:
 * whether the viewer holds Spark's modify ACL (only then a page offers a cancel); `base`: the
 * UI's root as this request reaches it (a proxy's prefix, the history server's application
 * path), which links start with. */
trait LanceCompactPage {
  def prefix: String
  def title: String
  def render(request: HttpServletRequest, canModify: Boolean, base: String): Seq[Node]
}

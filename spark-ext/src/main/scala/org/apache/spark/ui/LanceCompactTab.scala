package org.apache.spark.ui

import scala.xml.Node

import jakarta.servlet.http.{HttpServlet, HttpServletRequest, HttpServletResponse}
import org.apache.spark.SparkContext
import org.apache.spark.scheduler.SparkListener
import org.apache.spark.status.{AppHistoryServerPlugin, ElementTrackingStore}
import org.apache.spark.util.kvstore.KVStore

import io.github.lancecompact.spark.ui.{LanceCompactPage, LanceTabPages, LanceUiListener}

/** The Lance tab (`/lance/`) in a Spark UI: Spark's tab, page and header classes are
 * `private[spark]`, so this shim lives in Spark's package and the pages are the product's.
 * Spark's view ACLs apply to every page (its filter guards each handler); the one handler that
 * acts, `/lance/cancel` (POST, live only), checks the modify ACL (and `spark.ui.killEnabled`) itself. */
final class LanceCompactTab(ui: SparkUI, pages: Seq[LanceCompactPage]) extends SparkUITab(ui, "lance") {
  override val name: String = "Lance"

  /** As Spark's own kill links (`spark.ui.killEnabled` and the viewer's modify ACL), and more
   * strictly: with ACLs on, a request of no known user (no login filter in front of the UI) is
   * refused, where Spark's own check lets it through. */
  private def canModify(request: HttpServletRequest): Boolean =
    ui.killEnabled && (!ui.securityManager.aclsEnabled() || request.getRemoteUser != null) &&
      ui.securityManager.checkModifyPermissions(request.getRemoteUser)

  pages.foreach { p =>
    attachPage(new WebUIPage(p.prefix) {
      override def render(request: HttpServletRequest): Seq[Node] =
        LanceCompactTab.header(request, p.title,
          p.render(request, canModify(request), UIUtils.prependBaseUri(request, basePath)), LanceCompactTab.this)
    })
  }

  /** POST /lance/cancel with `id`: `cancel(id)` for a viewer with the modify ACL, then back to
   * the Running page. */
  def attachCancel(cancel: Long => Boolean): Unit =
    LanceCompactTab.attachServlet(ui, "/lance/cancel", new HttpServlet {
      override def doPost(request: HttpServletRequest, response: HttpServletResponse): Unit = {
        if (!canModify(request)) {
          response.sendError(HttpServletResponse.SC_FORBIDDEN, "cancelling a statement needs Spark's modify ACL")
        } else if (!LanceCompactTab.sameOrigin(request)) {
          response.sendError(HttpServletResponse.SC_FORBIDDEN, "a cancel must come from the Spark UI's own page")
        } else {
          Option(request.getParameter("id")).flatMap(_.toLongOption).foreach(cancel)
          response.sendRedirect(UIUtils.prependBaseUri(request, basePath, "/lance/running/"))
        }
      }
    })
}

object LanceCompactTab {
  /** Whether a POST comes from a page of this UI: a browser names the page's origin (`Origin`,
   * else `Referer`), and another site's form or script (a cross-site request riding on the
   * viewer's login) names its own. A request naming none (curl, a script) is not a browser's
   * cross-site one: the ACL alone decides. Behind a proxy the forwarded host counts too. */
  private[ui] def sameOrigin(request: HttpServletRequest): Boolean = {
    def authority(url: String): Option[String] =
      scala.util.Try(new java.net.URI(url)).toOption.flatMap(u => Option(u.getRawAuthority)).map(_.toLowerCase)
    val hosts = Seq(request.getHeader("Host"), request.getHeader("X-Forwarded-Host"))
      .flatMap(Option(_)).flatMap(_.split(",").map(_.trim.toLowerCase)).toSet
    Option(request.getHeader("Origin")).orElse(Option(request.getHeader("Referer"))) match {
      case None => true
      case Some(named) => authority(named).exists(hosts.contains)
    }
  }

  /** Spark's page with its header and this tab active. `UIUtils.headerSparkPage` gained a flag
   * between 4.0 and 4.2: found by name, every flag after the help text false. */
  private lazy val headerMethod = UIUtils.getClass.getMethods.find(_.getName == "headerSparkPage")
    .getOrElse(throw new IllegalStateException("this Spark has no UIUtils.headerSparkPage"))

  /** `WebUI.attachHandler(contextPath, servlet, pathSpec)`, found by its parameter types: its
   * other overload names Jetty's handler class, whose package differs across Spark 4 lines. */
  private def attachServlet(ui: SparkUI, path: String, servlet: HttpServlet): Unit =
    classOf[WebUI].getMethod("attachHandler", classOf[String], classOf[HttpServlet], classOf[String])
      .invoke(ui, path, servlet, "/")

  def header(request: HttpServletRequest, title: String, content: => Seq[Node], tab: SparkUITab): Seq[Node] = {
    val flags = Seq.fill(headerMethod.getParameterCount - 5)(java.lang.Boolean.FALSE)
    val args: Seq[AnyRef] = Seq(request, title, () => content, tab, None) ++ flags
    headerMethod.invoke(UIUtils, args: _*).asInstanceOf[Seq[Node]]
  }

  /** The live UI's tab and the listener that fills its store; None without a UI
   * (`spark.ui.enabled=false`): then only the event log keeps the events. */
  def attachLive(sc: SparkContext, listener: KVStore => SparkListener,
                 pages: (KVStore, Boolean) => Seq[LanceCompactPage]): Option[LanceCompactTab] =
    sc.ui.map { ui =>
      val store = sc.statusStore.store
      sc.addSparkListener(listener(store))
      val tab = new LanceCompactTab(ui, pages(store, true))
      ui.attachTab(tab)
      tab
    }

  /** The history server's: an application whose event log holds Lance events gets the tab. */
  def attachHistory(ui: SparkUI, present: KVStore => Boolean, pages: (KVStore, Boolean) => Seq[LanceCompactPage]): Unit = {
    val store = ui.store.store
    if (present(store)) ui.attachTab(new LanceCompactTab(ui, pages(store, false)))
  }
}

/** Found by the history server through META-INF/services (the product's jar on its class path):
 * rebuilds the Lance tab of a finished application from its event log. Reads no SparkEnv. */
final class LanceCompactHistoryPlugin extends AppHistoryServerPlugin {
  override def createListeners(conf: org.apache.spark.SparkConf, store: ElementTrackingStore): Seq[SparkListener] =
    Seq(new LanceUiListener(store))

  override def setupUI(ui: SparkUI): Unit =
    LanceCompactTab.attachHistory(ui, LanceTabPages.present, (store, live) => LanceTabPages.pages(store, live))
}

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

  /** As Spark's own kill links: `spark.ui.killEnabled` and the viewer's modify ACL. */
  private def canModify(request: HttpServletRequest): Boolean =
    ui.killEnabled && ui.securityManager.checkModifyPermissions(request.getRemoteUser)

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
        } else {
          Option(request.getParameter("id")).flatMap(_.toLongOption).foreach(cancel)
          response.sendRedirect(UIUtils.prependBaseUri(request, basePath, "/lance/running/"))
        }
      }
    })
}

object LanceCompactTab {
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

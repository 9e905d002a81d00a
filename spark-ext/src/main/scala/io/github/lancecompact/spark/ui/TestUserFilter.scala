package io.github.lancecompact.spark.ui

import jakarta.servlet.{Filter, FilterChain, FilterConfig, ServletException, ServletRequest, ServletResponse}
import jakarta.servlet.http.{HttpServletRequest, HttpServletRequestWrapper}

/** Tests only: a UI filter (`spark.ui.filters`) that makes the request's user the value of its
 * cookie `lance_test_user` (no cookie: no user), so a real browser can be two people and Spark's
 * view and modify ACLs can be tested. It trusts whatever the browser sends, so it refuses to start
 * unless the process was started for tests (`LANCE_COMPACT_TEST_HOOKS=1` in the JVM's
 * environment, as python/lance_compact/runtime/hooks.py): an operator who named it would get a
 * UI that does not start, never one where anyone can claim any name. */
final class TestUserFilter extends Filter {
  override def init(config: FilterConfig): Unit =
    if (System.getenv("LANCE_COMPACT_TEST_HOOKS") != "1")
      throw new ServletException("TestUserFilter is for tests only (LANCE_COMPACT_TEST_HOOKS=1 is not set)")

  override def doFilter(request: ServletRequest, response: ServletResponse, chain: FilterChain): Unit = request match {
    case http: HttpServletRequest =>
      val user = Option(http.getCookies).toSeq.flatten.find(_.getName == "lance_test_user").map(_.getValue).filter(_.nonEmpty)
      chain.doFilter(user.map(u => new HttpServletRequestWrapper(http) { override def getRemoteUser: String = u }).getOrElse(http), response)
    case _ => chain.doFilter(request, response)
  }

  override def destroy(): Unit = ()
}

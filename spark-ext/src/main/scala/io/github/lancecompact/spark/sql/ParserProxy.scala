package io.github.lancecompact.spark.sql

import java.lang.reflect.{InvocationHandler, InvocationTargetException, Method, Proxy}

import org.apache.spark.sql.catalyst.parser.ParserInterface

/** A parser that is a dynamic proxy of Spark's own parser interface, so that every method of the
 * running Spark's parser is passed on, those a later Spark adds included (4.3 added
 * `splitStatements`, which a class compiled against 4.2 could not pass on). The one place the
 * guard's parser (guard/GuardParser) and the hinting parser ([[HintingParser]]) make theirs. */
object ParserProxy {
  /** A parser whose every call goes to `handle(method, args)` (args never null). */
  def apply(handle: (Method, Array[AnyRef]) => AnyRef): ParserInterface =
    Proxy.newProxyInstance(classOf[ParserInterface].getClassLoader, Array(classOf[ParserInterface]),
      new InvocationHandler {
        override def invoke(proxy: AnyRef, method: Method, args: Array[AnyRef]): AnyRef =
          handle(method, Option(args).getOrElse(Array.empty[AnyRef]))
      }).asInstanceOf[ParserInterface]

  /** `method` of `delegate` with `args`; what it throws, thrown as a proxy may throw it. */
  def call(delegate: ParserInterface, method: Method, args: Array[AnyRef]): AnyRef =
    try method.invoke(delegate, args: _*)
    catch { case e: InvocationTargetException => throw passable(method, e.getCause) }

  /** What the parser threw, as a proxy may throw it: a checked exception the method does not
   * declare (SQL scripting's SqlScriptingException) would reach the caller as an
   * UndeclaredThrowableException without its message. */
  def passable(method: Method, t: Throwable): Throwable = t match {
    case _: RuntimeException | _: Error => t
    case _ if method.getExceptionTypes.exists(_.isInstance(t)) => t
    case _ => new RuntimeException(t.getMessage, t)
  }
}

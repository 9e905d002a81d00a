package io.github.lancecompact.spark.engine

import java.util.concurrent.{CompletableFuture, ConcurrentHashMap, CountDownLatch, LinkedBlockingQueue, TimeUnit}
import java.util.concurrent.atomic.AtomicLong

import org.apache.spark.SparkContext
import org.apache.spark.api.java.JavaSparkContext

/** What the engine process reaches over Py4J. Every call goes Python -> JVM: the engine
 * long-polls for requests and posts their responses, so no callback server is needed, and
 * the Spark jobs a request starts run on the JVM thread paired with the engine thread that
 * serves it (Py4J's pinned threads), under the caller's job group, tags and pool.
 */
final class EngineBridge(sc: SparkContext) {
  import EngineBridge._

  private final class Request(val id: String, val json: String,
                              val properties: Map[String, String]) {
    val response = new CompletableFuture[String]()
  }

  private val ids = new AtomicLong()
  private val queue = new LinkedBlockingQueue[Request]()
  private val pending = new ConcurrentHashMap[String, Request]()
  private val readyLatch = new CountDownLatch(1)

  /** The driver's SparkContext, which the engine wraps in a PySpark SparkContext. */
  def javaSparkContext(): JavaSparkContext = JavaSparkContext.fromSparkContext(sc)

  /** Called by the engine once it can serve requests. */
  def ready(): Unit = readyLatch.countDown()

  def awaitReady(millis: Long): Boolean = readyLatch.await(millis, TimeUnit.MILLISECONDS)

  /** The next request's JSON `{"id", "action", "request"}`, or null after `timeoutMs`. */
  def nextRequest(timeoutMs: Long): String = {
    val r = queue.poll(timeoutMs, TimeUnit.MILLISECONDS)
    if (r == null) null else r.json
  }

  /** On the calling (engine-paired) thread: the local properties of the request's caller,
   * so cancelling the caller's statement (job group, tags) cancels the engine's jobs too. */
  def adopt(id: String): Unit = {
    val props = Option(pending.get(id)).map(_.properties).getOrElse(Map.empty)
    Inherited.foreach(k => sc.setLocalProperty(k, props.getOrElse(k, null)))
  }

  /** The engine's response to request `id` (JSON). */
  def respond(id: String, json: String): Unit =
    Option(pending.remove(id)).foreach(_.response.complete(json))

  /** Queue a request for the engine, with the caller's local properties. */
  private[engine] def submit(action: String, requestJson: String): CompletableFuture[String] = {
    val id = ids.incrementAndGet().toString
    val body = s"""{"id":"$id","action":${quote(action)},"request":${quote(requestJson)}}"""
    val props = Inherited.flatMap(k => Option(sc.getLocalProperty(k)).map(k -> _)).toMap
    val r = new Request(id, body, props)
    pending.put(id, r)
    queue.put(r)
    r.response
  }

  /** Fail every request in flight (the engine process ended). */
  private[engine] def failAll(error: Throwable): Unit = {
    pending.values().forEach(_.response.completeExceptionally(error))
    pending.clear()
    queue.clear()
  }
}

object EngineBridge {
  /** Local properties that tie a job to its statement: cancellation and scheduling. */
  val Inherited: Seq[String] = Seq("spark.jobGroup.id", "spark.job.interruptOnCancel",
    "spark.job.tags", "spark.scheduler.pool")

  private val mapper = new com.fasterxml.jackson.databind.ObjectMapper()

  def quote(s: String): String = mapper.writeValueAsString(s)
}

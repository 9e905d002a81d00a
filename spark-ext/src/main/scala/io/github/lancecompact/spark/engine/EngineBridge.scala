package io.github.lancecompact.spark.engine

import java.util.concurrent.{CompletableFuture, ConcurrentHashMap, CountDownLatch, LinkedBlockingQueue, TimeUnit}
import java.util.concurrent.atomic.AtomicLong

import scala.concurrent.Await
import scala.concurrent.duration.Duration

import org.apache.spark.SparkContext
import org.apache.spark.api.java.{JavaRDD, JavaSparkContext}

/** What the engine process reaches over Py4J. Every call goes Python -> JVM: the engine
 * long-polls for requests and posts their responses, so no callback server is needed, and
 * the Spark jobs a request starts run on the JVM thread paired with the engine thread that
 * serves it (Py4J's pinned threads), under the caller's job group, tags and pool, plus a job
 * tag of the request's own (so its jobs can be cancelled when the caller is interrupted or
 * the engine dies).
 *
 * The engine also calls `heartbeat()` every few seconds (its liveness, which the waiting
 * caller checks) and `cancelled(id)` before each batch and commit.
 */
final class EngineBridge(sc: SparkContext) {
  import EngineBridge._

  private final class Request(val id: String, val action: String, val json: String,
                              val properties: Map[String, String], val request: String) {
    /** Its place among the requests the engine took (0: still queued). */
    @volatile var taken: Long = 0L
    /** Whether its cancels are watched for while no job of it runs (CancelWatch.scala). */
    val watched: Boolean = Watched.contains(action)
    val response = new CompletableFuture[String]()
    /** The job tag of this request's Spark jobs: unguessable (a random UUID, not the request's
     * number), because a cancel of a tag cancels the statement that carries it, and on a shared
     * server a SQL user can put any tag on statements of their own (SET spark.job.tags) and
     * cancel those: a numbered tag let one user cancel another's statement. */
    val tag: String = s"lance-compact-$instance-request-${java.util.UUID.randomUUID()}"
    @volatile var cancelReason: String = _
    /** When it was cancelled (System.nanoTime; 0 while it was not): a worker that has not
     * answered within the pool's grace period after it is killed (EngineProcess.call). */
    @volatile var cancelledAt: Long = 0L
    /** What the engine is committing now (the commit gate: [[beginCommit]]), null outside a commit. */
    @volatile var committing: String = _
    /** What its commits landed, in order ([[endCommit]]): what a caller hears after a cancel or a death. */
    val landed = new java.util.concurrent.CopyOnWriteArrayList[String]()
    /** Files it wrote and has not committed, by table location (JSON lists; [[staged]]): removed
     * by the pool if the worker dies or is killed (EnginePool.discardStaged). */
    val staged = new ConcurrentHashMap[String, String]()

    /** Record the cancel (the first reason wins). */
    def markCancelled(why: String): Unit = synchronized {
      if (cancelReason == null) { cancelReason = why; cancelledAt = System.nanoTime() }
    }
  }

  /** Tells this bridge's tags from those of an earlier engine's bridge in this JVM. */
  private val instance = Instances.incrementAndGet()
  @volatile private var lastBeat = System.nanoTime()

  private val ids = new AtomicLong()
  /** How many requests the engine took from the queue (one poller: in the order taken). */
  private val takenCount = new AtomicLong()
  private val queue = new LinkedBlockingQueue[Request]()
  private val pending = new ConcurrentHashMap[String, Request]()
  private val readyLatch = new CountDownLatch(1)
  /** Keeps a cancel sent while no job of a statement runs (CancelWatch.scala). */
  private val watch = new CancelWatch(sc, (id, why) => cancelledBySpark(id, why))
  sc.addSparkListener(watch)
  /** Whether statements' cancels are watched for (`spark.lance.compact.cancelWatch`, default true). */
  @volatile var cancelWatch: Boolean = sc.getConf.getBoolean(CancelWatchConf, true)

  /** The driver's SparkContext, which the engine wraps in a PySpark SparkContext. */
  def javaSparkContext(): JavaSparkContext = {
    // A worker started by the plugin may connect while the SparkContext is still being made:
    // it is ready once it is the active one (the last step of its constructor).
    val deadline = System.nanoTime() + 120L * 1000000000L
    while (!org.apache.spark.LanceCompactActiveContext.isActive(sc) && !sc.isStopped && System.nanoTime() < deadline) Thread.sleep(10)
    JavaSparkContext.fromSparkContext(sc)
  }

  /** Called by the engine once it can serve requests. */
  def ready(): Unit = { lastBeat = System.nanoTime(); readyLatch.countDown() }

  /** Called by the engine's heartbeat thread every [[heartbeatIntervalMs]]. */
  def heartbeat(): Unit = lastBeat = System.nanoTime()

  /** The heartbeat with what the engine is serving: `<requests taken>;<id>,<id>,...;<replace>`.
   * A request the engine took (counted) but no longer lists ended without an answer (its
   * serving thread is gone): it is failed now rather than waited on while the engine lives.
   * `replace` 1: the engine's memory is over its ceiling ([[EngineProcess]] replaces it once
   * no statement uses it). */
  def heartbeat(serving: String): Unit = {
    lastBeat = System.nanoTime()
    val parts = serving.split(";", -1)
    val count = parts.headOption.flatMap(_.toLongOption).getOrElse(0L)
    val listed = parts.lift(1).map(_.split(",").filter(_.nonEmpty).toSet).getOrElse(Set.empty[String])
    if (parts.lift(2).contains("1")) replaceRequested = true
    pending.values().forEach { r =>
      if (r.taken > 0 && r.taken <= count && !listed.contains(r.id) && pending.remove(r.id, r)) {
        r.markCancelled("the engine stopped serving it")
        Progress.ended(r.tag)
        watch.unwatch(r.id)
        cancelJobs(r)
        r.response.completeExceptionally(new IllegalStateException(
          s"the lance_compact engine stopped serving ${r.action} without answering (the thread serving " +
            "it ended); nothing more runs for it and the engine serves other statements. See its log."))
      }
    }
  }

  /** The engine asked to be replaced (its memory over its ceiling, runtime/memory.py). */
  @volatile var replaceRequested: Boolean = false

  /** No request waits for an answer (one whose caller gave up after a cancel still does). */
  def idle: Boolean = pending.isEmpty

  /** How often the engine should call [[heartbeat]]. */
  @volatile var heartbeatIntervalMs: Long = 2000

  /** Milliseconds since the engine's last heartbeat. */
  def silentMs: Long = (System.nanoTime() - lastBeat) / 1000000

  /** Why request `id`'s statement was cancelled, or null while it was not: the engine asks
   * before each batch, each commit and each maintenance step. */
  def cancelled(id: String): String = Option(pending.get(id)).map(_.cancelReason).orNull

  /** The commit gate: the engine asks before each commit (and each step that deletes files).
   * Atomically with a cancel: null, and the request is marked committing (a cancel from now on
   * waits for the commit and is told what landed), or the cancel's reason (the engine commits
   * nothing and answers "cancelled"). A request this bridge no longer holds (its caller is
   * gone, the engine was replaced) gets a reason too: nothing commits for a statement nobody
   * waits for. */
  def beginCommit(id: String, what: String): String = Option(pending.get(id)) match {
    case None => "the statement is no longer waiting for its answer"
    case Some(r) => r.synchronized {
      if (r.cancelReason != null) r.cancelReason
      else { r.committing = what; null }
    }
  }

  /** The commit begun by [[beginCommit]] ended; `landed` says what it committed ("" if nothing). */
  def endCommit(id: String, landed: String): Unit = Option(pending.get(id)).foreach { r =>
    r.synchronized {
      r.committing = null
      if (landed != null && landed.nonEmpty) r.landed.add(landed)
    }
  }

  /** Files request `id` wrote under table location `uri` and has not committed (a JSON list of
   * paths relative to it; an empty list: none any more). */
  def staged(id: String, uri: String, pathsJson: String): Unit = Option(pending.get(id)).foreach { r =>
    if (pathsJson == null || pathsJson == "[]") r.staged.remove(uri) else r.staged.put(uri, pathsJson)
  }

  /** Request `id`'s state for its waiting caller (EngineProcess.call): when it was cancelled
   * (0: not), and whether a commit of it is under way. */
  private[engine] def cancelledAt(id: String): Long = Option(pending.get(id)).map(_.cancelledAt).getOrElse(0L)
  private[engine] def committing(id: String): String = Option(pending.get(id)).map(_.committing).orNull
  private[engine] def landed(id: String): Seq[String] =
    Option(pending.get(id)).map(r => scala.jdk.CollectionConverters.ListHasAsScala(r.landed).asScala.toSeq).getOrElse(Nil)
  /** Request `id`'s uncommitted files and its request JSON (for the pool's removal of them). */
  private[engine] def stagedOf(id: String): Map[String, String] =
    Option(pending.get(id)).map(r => scala.jdk.CollectionConverters.MapHasAsScala(r.staged).asScala.toMap).getOrElse(Map.empty)
  private[engine] def requestJson(id: String): Option[String] = Option(pending.get(id)).map(_.request)

  def awaitReady(millis: Long): Boolean = readyLatch.await(millis, TimeUnit.MILLISECONDS)

  /** The next request's JSON `{"id", "action", "request"}`, or null after `timeoutMs`. */
  def nextRequest(timeoutMs: Long): String = {
    val r = queue.poll(timeoutMs, TimeUnit.MILLISECONDS)
    if (r == null) null else { r.taken = takenCount.incrementAndGet(); r.json }
  }

  /** On the calling (engine-paired) thread: the local properties of the request's caller,
   * so cancelling the caller's statement (job group, tags) cancels the engine's jobs too. */
  def adopt(id: String): Unit = {
    val request = Option(pending.get(id))
    val props = request.map(_.properties).getOrElse(Map.empty)
    Inherited.foreach(k => sc.setLocalProperty(k, props.getOrElse(k, null)))
    request.foreach(r => sc.addJobTag(r.tag))
  }

  /** Run the engine's `rdd` to its end as one Spark job, on the calling (engine-paired) thread,
   * so under the request's adopted job group, tags and pool; throws the job's failure as
   * `SparkContext.runJob` does. */
  def runJob(rdd: JavaRDD[Array[Byte]]): Unit = {
    val r = rdd.rdd
    val job = sc.submitJob(r, Drain, 0 until r.partitions.length, (_: Int, _: Unit) => (), ())
    Await.ready(job, Duration.Inf)
    job.value.foreach(_.get)
  }

  /** The engine's response to request `id` (JSON). */
  def respond(id: String, json: String): Unit = {
    watch.unwatch(id)
    Option(pending.remove(id)).foreach { r => Progress.ended(r.tag); r.response.complete(json) }
  }

  /** The engine says what request `id` is doing now ([[Progress]]): for its caller, the driver's
   * log and, where `ui`, the Spark UI. */
  def progress(id: String, text: String, ui: Boolean): Unit =
    Option(pending.get(id)).foreach(r => Progress.said(sc, r.tag, r.action, text, r.properties, ui))

  /** The engine's figures for request `id` (JSON: bytes so far, a maintenance version's cost, a
   * layout), for the Lance tab ([[Progress.figures]]). */
  def figures(id: String, json: String): Unit =
    Option(pending.get(id)).foreach(r => Progress.figures(sc, r.tag, json))

  /** Mark request `id` cancelled (the engine stops at its next check) and cancel its
   * running Spark jobs. */
  private[engine] def cancel(id: String, reason: String): Unit =
    Option(pending.get(id)).foreach { r =>
      r.markCancelled(reason)
      watch.cancelled(id)
      cancelJobs(r)
    }

  /** Request `id`'s statement was cancelled through Spark (a cancel of its job group, tags or all
   * jobs, or of one of its jobs: CancelWatch): the whole statement is, with Spark's reason. */
  private def cancelledBySpark(id: String, why: String): Unit =
    Option(pending.get(id)).foreach { r =>
      r.markCancelled(why)
      cancelJobs(r)
    }

  private def cancelJobs(r: Request): Unit =
    try sc.cancelJobsWithTag(r.tag) catch { case _: IllegalStateException => () } // context stopped

  /** Queue a request for the engine, with the caller's local properties; returns its id and
   * its future response. */
  private[engine] def submit(action: String, requestJson: String): (String, CompletableFuture[String]) = {
    val id = ids.incrementAndGet().toString
    val body = s"""{"id":"$id","action":${quote(action)},"request":${quote(requestJson)}}"""
    val r = new Request(id, action, body, EngineBridge.callerProperties(sc), requestJson)
    pending.put(id, r)
    // watched from now: a cancel sent while it waits for the engine is kept too
    if (r.watched && cancelWatch) watch.watch(r.id, r.tag, r.properties)
    Progress.started(sc, r.tag)  // on the caller's thread: the key it set for its progress line
    queue.put(r)
    // The process ended before this came (leased as it was killed, its end not yet seen then):
    // [[failAll]] ran already, so it is failed here, as never taken (put first, then looked: one
    // of the two sees it).
    val ended = endedWith
    if (ended != null && pending.remove(id, r)) {
      watch.unwatch(id)
      Progress.ended(r.tag)
      r.response.completeExceptionally(ended(Ended(r.id, r.action, r.request, None, Nil, Map.empty, taken = false)))
    }
    (id, r.response)
  }

  /** Set when the engine process ended ([[failAll]]): what a request's caller hears then. */
  @volatile private var endedWith: Ended => Throwable = _

  /** Fail every request in flight (the engine process ended) with the error `error` makes
   * of it (what it was doing when the process ended: [[Ended]]) and cancel the Spark jobs it had
   * started for them, which would otherwise run to their end. */
  private[engine] def failAll(error: Ended => Throwable): Unit = {
    endedWith = error
    pending.values().forEach { r =>
      r.markCancelled("the engine process ended")
      Progress.ended(r.tag)
      cancelJobs(r)
      val ended = Ended(r.id, r.action, r.request, Option(r.committing),
        scala.jdk.CollectionConverters.ListHasAsScala(r.landed).asScala.toSeq,
        scala.jdk.CollectionConverters.MapHasAsScala(r.staged).asScala.toMap, taken = r.taken > 0)
      r.response.completeExceptionally(error(ended))
    }
    pending.values().forEach(r => watch.unwatch(r.id))
    pending.clear()
    queue.clear()
    try sc.removeSparkListener(watch) catch { case _: Exception => () }
    watch.stop()
  }
}

object EngineBridge {
  /** A request whose engine process ended before answering: its action and request JSON, the
   * commit under way then (if any), what its commits landed, and the files it wrote and had not
   * committed (JSON lists by table location); `taken`: whether the engine had taken it from its
   * queue (if not, nothing of it ran: the pool runs it in another worker). */
  final case class Ended(id: String, action: String, request: String, committing: Option[String],
                         landed: Seq[String], staged: Map[String, String], taken: Boolean = true)

  /** Local properties that tie a job to its statement: cancellation and scheduling. */
  val Inherited: Seq[String] = Seq("spark.jobGroup.id", "spark.job.interruptOnCancel",
    "spark.job.tags", "spark.scheduler.pool")

  /** The calling thread's statement as its jobs and cancels know it: its [[Inherited]] local
   * properties, with Spark Classic's session tags (SparkSession.addTag, interruptTag/interruptAll:
   * CancelWatch.scala) among its tags. */
  def callerProperties(sc: SparkContext): Map[String, String] = {
    val own = Inherited.flatMap(k => Option(sc.getLocalProperty(k)).map(k -> _)).toMap
    val tags = (own.get("spark.job.tags").toSeq.flatMap(_.split(",")) ++ CancelWatch.sessionTags())
      .filter(_.nonEmpty).distinct
    if (tags.isEmpty) own else own + ("spark.job.tags" -> tags.mkString(","))
  }

  /** Actions whose statements' cancels are watched for: those that run Spark jobs and commit, and
   * those that commit or delete files without a job (drop_index, ALTER TABLE's properties,
   * cleanup): a cancel of their job group, tags or all jobs before their commit gate stops them. */
  val Watched: Set[String] = Set("compact", "maintain", "maintain_warehouse", "create_index", "optimize_indices",
    "drop_index", "alter_properties", "cleanup")
  val CancelWatchConf = "spark.lance.compact.cancelWatch"

  /** What a job of [[EngineBridge.runJob]] does with each partition: compute it (the engine's
   * tasks report through accumulators). An object, not a lambda: Spark's closure cleaner
   * passes it as it is instead of reading its class file on every job. */
  private object Drain extends (Iterator[Array[Byte]] => Unit) with Serializable {
    override def apply(it: Iterator[Array[Byte]]): Unit = while (it.hasNext) it.next()
  }

  private val mapper = new com.fasterxml.jackson.databind.ObjectMapper()
  private val Instances = new AtomicLong()

  def quote(s: String): String = mapper.writeValueAsString(s)
}

package io.github.lancecompact.spark.engine

import java.io.File
import java.nio.file.Files

import scala.collection.mutable
import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.{JsonNode, ObjectMapper}
import com.fasterxml.jackson.databind.node.ObjectNode
import org.apache.spark.SparkContext
import org.apache.spark.internal.Logging
import org.apache.spark.scheduler.{SparkListener, SparkListenerApplicationEnd}
import org.apache.spark.sql.SparkSession

/** The driver's engine workers: one statement, one worker.
 *
 * Each statement (a procedure, a catalog read, a system table) leases a worker
 * ([[EngineProcess]]: a Python process with pylance imported and its Lance session ready) for
 * its whole run, so statements of different users never share a process, its CPU threads or its
 * memory at the same time (in one process Lance's runtime threads are shared by everything in
 * it: a compaction beside an index build in another thread took 18.1 s instead of 0.02 s).
 *
 *  - Size: at most `spark.lance.compact.engine.workers` workers (default twice the driver's
 *    cores, at least 2, at most 8); a statement that finds all of them leased waits its turn
 *    and hears so on its progress line.
 *  - Fairness between users (a shared Thrift or Connect server): no user's statements hold up
 *    another's beyond a bound. A worker cannot be taken from a running statement (that would
 *    lose its work), so a lone user who filled the pool (two index builds with
 *    `workers = 2`: another user's `SELECT count(*) FROM lance.system.table_health` waited
 *    16.2 s) is answered with ONE reserve worker above the size
 *    (`spark.lance.compact.engine.reserveWorker`, default on), leased only by a short statement
 *    ([[ShortActions]]: catalog reads, metadata and system tables, plans) or by the statement
 *    of a user who holds no worker. It is started by such a statement when it comes (not
 *    ahead: a lone user who fills the pool would start and stop one a statement), and leaves
 *    once the pool is no longer full. A cancel of a waiting statement's group or tags ends its
 *    wait (a watch of the pool's own until its request reaches a worker). A lone user (a notebook) still gets
 *    every worker, exactly as before. When a worker frees, it goes to the waiting statement of
 *    the user who holds the fewest workers (first come among equals), so a user holds at most
 *    N-1 while another waits. A wait is bounded (`spark.lance.compact.engine.waitTimeout`,
 *    default 10 min): past it the statement fails, LANCE_CANCELLED, having run nothing.
 *    The user is the one Spark runs the statement as ([[userOf]]).
 *  - Warm: `spark.lance.compact.engine.spareWorkers` (default 1) idle workers are kept started,
 *    from the session's start when the plugin is on ([[EnginePlugin]]), so a statement does not
 *    pay a process start.
 *  - Warm caches: a statement on a table prefers a free worker whose last statement read it.
 *  - Renewal: a worker is replaced between statements after
 *    `spark.lance.compact.engine.maxStatements` statements (default 1000) or once its memory
 *    stays over `spark.lance.compact.engine.memoryCeiling`.
 *  - Deaths: a worker that dies (or is killed after a cancel it did not honour in time) fails
 *    only its own statement, saying what was and was not committed; the files it wrote and had
 *    not committed are removed by another worker (`discard_staged`).
 */
final class EnginePool private (val sc: SparkContext, python: String, val logFile: File) extends Logging {
  import EnginePool._

  private val conf = sc.getConf
  private val cores = conf.getOption("spark.driver.cores").flatMap(_.toIntOption)
    .getOrElse(Runtime.getRuntime.availableProcessors())
  val maxWorkers: Int = math.max(1, conf.getInt(WorkersConf, math.max(2, math.min(8, 2 * cores))))
  val spares: Int = math.max(0, math.min(maxWorkers, conf.getInt(SparesConf, 1)))
  val maxStatements: Int = math.max(1, conf.getInt(MaxStatementsConf, 1000))
  /** Workers above [[maxWorkers]] for a short statement or a user holding none (0 or 1). */
  val reserve: Int = if (conf.getBoolean(ReserveConf, true)) 1 else 0
  val waitTimeoutMs: Long = math.max(1000L, conf.getTimeAsMs(WaitTimeoutConf, "10min"))

  /** Started and free: spares that never served first, then the most recently released last. */
  private val idle = mutable.ArrayBuffer[EngineProcess]()
  private val leased = mutable.LinkedHashSet[EngineProcess]()
  /** Who each leased worker serves (a user name, [[userOf]]). */
  private val leasedBy = mutable.HashMap[EngineProcess, String]()
  private var starting = 0
  private var numbered = 0
  private var closed = false
  /** Statements waiting for a worker, in the order they came (their turn tickets). */
  private val waiting = new java.util.ArrayDeque[Ticket]()

  private def total: Int = idle.size + leased.size + starting
  /** Workers that ended without being stopped by the pool (died, were killed, hung). */
  private val lost = new java.util.concurrent.atomic.AtomicInteger()
  def lostWorkers(): Int = lost.get()
  /** Statements given another worker: the one started for it was killed before it was ready,
   * or the one it was given died before it took the statement. */
  private val restarted = new java.util.concurrent.atomic.AtomicInteger()
  def restartedStarts(): Int = restarted.get()

  // Every second: a free worker that died or asked to be replaced is replaced now, not when a
  // statement next wants it (which would then wait for a start).
  background("lance-compact-engine-pool") {
    while (!synchronized(closed) && !sc.isStopped) {
      Thread.sleep(1000)
      // seen from the session's start, not its first statement's (a cancel sent while that
      // statement is parsed and analysed is then remembered for it)
      Option(queueWatch).foreach(_.observing)
      val replaced = synchronized { val before = idle.size; retireIdle(); idle.size < before }
      if (replaced) topUp()
    }
  }

  /** Run `action` in a worker of its own and return its response JSON. */
  def call(action: String, requestJson: String): String = call(action, requestJson, tries = maxWorkers + 1)

  /** A worker that died before it took the request from its queue (nothing of it ran: leased as
   * it was killed, say) is followed by another, up to `tries` workers in all (several free
   * workers killed at once each die so; each such death leaves the pool). */
  private def call(action: String, requestJson: String, tries: Int): String = {
    val since = CancelWatch.statementStart()
    val (table, subject) = tableAndSubject(requestJson)
    val ticket = Ticket(userOf(sc), ShortActions.contains(action))
    // A cancel of the statement's job group, tags or all jobs while it waits for a worker (or one
    // starts for it) posts no event a worker could see: the pool watches for it until the
    // request is queued in its worker, whose own watch sees every cancel from then on.
    val watched = Option(queueWatch).exists { w =>
      waitingById.put(ticket.id, ticket)
      w.watch(ticket.id, ticket.id, EngineBridge.callerProperties(sc), since)
      true
    }
    def unwatch(): Unit = if (watched) { queueWatch.unwatch(ticket.id); waitingById.remove(ticket.id) }
    val worker = try lease(table, subject, action, ticket) catch { case e: Throwable => unwatch(); throw e }
    val answer = try {
      if (ticket.cancelled != null) throw cancelledWaiting(subject, action, ticket.cancelled)
      Some(worker.call(action, requestJson, id => {
        unwatch()
        val why = ticket.cancelled
        if (why != null) worker.bridge.cancel(id, why)  // came before its own watch began
      }))
    } catch {
      case e: EngineFailure =>
        if (e.ended.nonEmpty || e.kind == LanceCompactException.WorkerLost) lost.incrementAndGet()
        e.ended.filter(_.staged.nonEmpty).foreach(discardLater)
        val untaken = e.ended.exists(r => !r.taken && r.landed.isEmpty && r.staged.isEmpty)
        if (tries > 1 && untaken && e.kind == LanceCompactException.WorkerLost && !sc.isStopped && !synchronized(closed)) {
          logWarning(s"$action: its engine worker died before it took the statement (${e.getMessage.take(200)}); " +
            "running it in another")
          restarted.incrementAndGet()
          None
        } else throw e
    } finally { unwatch(); release(worker, table) }
    answer.getOrElse(call(action, requestJson, tries - 1))
  }

  /** Watches statements for cancels until their requests reach a worker (null: the cancel
   * watch is off, `spark.lance.compact.cancelWatch`); the cancel is seen at the wait's next turn. */
  private val queueWatch: CancelWatch =
    if (conf.getBoolean(EngineBridge.CancelWatchConf, true)) new CancelWatch(sc, (id, why) =>
      Option(waitingById.get(id)).foreach(t => if (t.cancelled == null) t.cancelled = why), remember = true)
    else null
  private val waitingById = new java.util.concurrent.ConcurrentHashMap[String, Ticket]()

  /** A statement gives up its place in the queue (it fails): the next one may take its turn. */
  private def leaveQueue(ticket: Ticket): Unit = {
    synchronized { waiting.remove(ticket); notifyAll() }
    Progress.waiting(sc, null)
  }

  private def cancelledWaiting(subject: String, action: String, why: String): EngineFailure =
    new EngineFailure(s"$subject$action was cancelled while it waited for an engine worker ($why): nothing ran and " +
      "nothing was committed", LanceCompactException.Cancelled)

  private def lease(table: String, subject: String, action: String, ticket: Ticket): EngineProcess = {
    val user = ticket.user
    synchronized(waiting.addLast(ticket))
    var got: EngineProcess = null
    var build = false
    var came = System.nanoTime()
    var waitedSince = 0L
    def waitTurn(): Unit = {
      if (waitedSince == 0L) {
        waitedSince = System.nanoTime()
        Progress.waiting(sc, s"waiting for a free engine worker: all $maxWorkers serve other statements " +
          s"(${math.max(0, waiting.asScala.toSeq.indexWhere(_ eq ticket))} waiting before it; $WorkersConf)")
      }
      // Bounded: never a hang behind statements that outlast the operator's bound. A worker's
      // start (bounded by its own timeout) is not the pool being full: the clock starts after it.
      if (starting > 0) came = System.nanoTime()
      else if (System.nanoTime() - came > waitTimeoutMs * 1000000L) {
        leaveQueue(ticket)
        throw new EngineFailure(s"$subject$action waited ${waitTimeoutMs / 1000} s for an engine worker and got none " +
          s"($WaitTimeoutConf): all ${leased.size} workers served other statements (at most $maxWorkers, " +
          s"$WorkersConf); nothing ran and nothing was committed", LanceCompactException.Cancelled)
      }
      wait(250)
    }
    try {
      while (got == null && !build) {
        synchronized {
          if (closed) throw new EngineFailure("the lance_compact engine pool is closed (the session is ending)",
            LanceCompactException.WorkerLost)
          retireIdle()
          if (ticket.cancelled != null) {
            leaveQueue(ticket)
            throw cancelledWaiting(subject, action, ticket.cancelled)
          }
          if (next() eq ticket) {
            pick(table) match {
              case Some(w) => got = w; leased += w; leasedBy(w) = user
              case None if total < limit(ticket) => build = true; starting += 1; numbered += 1
              case None => waitTurn()
            }
            if (got != null || build) waiting.remove(ticket)
          } else waitTurn()
        }
      }
    } catch {
      case e: InterruptedException =>
        leaveQueue(ticket)
        Thread.currentThread().interrupt()
        throw new EngineFailure(s"$subject$action was cancelled while it waited for an engine worker (all " +
          s"$maxWorkers were serving other statements, $WorkersConf): nothing ran and nothing was committed",
          LanceCompactException.Cancelled)
    }
    if (waitedSince != 0L) {
      Progress.waiting(sc, null)
      logInfo(s"$action waited ${(System.nanoTime() - waitedSince) / 1000000} ms for an engine worker")
    }
    if (build) {
      // a worker killed while it started for this statement is started again, once
      def started(): EngineProcess = try startWorker(synchronized(numbered)) catch {
        case e: EngineFailure if e.kind == LanceCompactException.WorkerLost && !sc.isStopped && !synchronized(closed) =>
          lost.incrementAndGet()
          restarted.incrementAndGet()
          logWarning(s"${e.getMessage}; starting another for $action")
          synchronized(numbered += 1)
          try startWorker(synchronized(numbered)) catch {
            case again: EngineFailure => throw new EngineFailure(s"$action got no engine worker: ${again.getMessage} " +
              s"(the one started before it was killed too); nothing ran and nothing was committed", again.kind)
          }
      }
      val w = try started() catch {
        case _: InterruptedException =>
          synchronized { starting -= 1; notifyAll() }
          Thread.currentThread().interrupt()
          throw new EngineFailure(s"$action was cancelled while an engine worker started for it: nothing ran and " +
            "nothing was committed", LanceCompactException.Cancelled)
        case e: Throwable => synchronized { starting -= 1; notifyAll() }; throw e
      }
      synchronized { starting -= 1; leased += w; leasedBy(w) = user }
      got = w
    }
    topUp()
    got
  }

  /** Workers leased by `user` now (under the lock). */
  private def heldBy(user: String): Int = leasedBy.valuesIterator.count(_ == user)

  /** The most workers the pool may have leased (and started) for `t`: the size, and the reserve
   * for a short statement or a user who holds none (under the lock). */
  private def limit(t: Ticket): Int =
    maxWorkers + (if (t.short || heldBy(t.user) == 0) reserve else 0)

  /** The waiting statement whose turn it is (under the lock): of those the pool may serve now,
   * the one whose user holds the fewest workers, first come among equals; null if none may. */
  private def next(): Ticket = {
    var best: Ticket = null
    var bestHeld = Int.MaxValue
    val it = waiting.iterator()
    while (it.hasNext) {
      val t = it.next()
      if (leased.size < limit(t)) {
        val held = heldBy(t.user)
        if (held < bestHeld) { best = t; bestHeld = held }
      }
    }
    best
  }

  /** Free workers that died or asked to be replaced since their last statement leave the pool
   * (called under the lock): none is handed to a statement. */
  private def retireIdle(): Unit = {
    val gone = idle.filter(w => !w.alive || w.overCeiling)
    if (gone.nonEmpty) {
      lost.addAndGet(gone.count(w => !w.alive && !sc.isStopped))
      idle --= gone
      gone.foreach { w =>
        if (w.alive) logInfo(s"lance_compact engine worker (pid ${w.pid}) replaced while free: its memory is over " +
          EngineProcess.CeilingConf)
        background("lance-compact-engine-stop")(w.stop())
      }
    }
  }

  /** A free worker: the one whose last statement read `table`, else the most recently used. */
  private def pick(table: String): Option[EngineProcess] = {
    val i = if (table.isEmpty) -1 else idle.lastIndexWhere(_.lastTable == table)
    val j = if (i >= 0) i else idle.size - 1
    if (j < 0) None else Some(idle.remove(j))
  }

  private def release(worker: EngineProcess, table: String): Unit = {
    var surplus: Option[EngineProcess] = None
    val retire = synchronized {
      leased -= worker
      leasedBy -= worker
      worker.served += 1
      if (table.nonEmpty) worker.lastTable = table
      val r = closed || !worker.alive || worker.overCeiling || worker.served >= maxStatements
      if (!r) idle += worker
      surplus = trimSurplus()
      notifyAll()
      r
    }
    surplus.foreach(w => background("lance-compact-engine-stop")(w.stop()))
    if (retire) {
      if (worker.alive) logInfo(s"lance_compact engine worker (pid ${worker.pid}) replaced after ${worker.served} " +
        s"statements${if (worker.overCeiling) s" (its memory over ${EngineProcess.CeilingConf})" else ""}")
      background("lance-compact-engine-stop")(worker.stop())
    }
    topUp()
  }

  /** Above the size with more than the spares free (the reserve, once the pool is no longer
   * full): the coldest free worker leaves (a spare that never served, else the least recently
   * used), not a warm one just released. Counts started workers only: one still starting is
   * trimmed, if still surplus, when it comes up (under the lock; the caller stops it). */
  private def trimSurplus(): Option[EngineProcess] =
    if (idle.size + leased.size > maxWorkers && idle.size > spares) Some(idle.remove(0)) else None

  /** Start workers in the background until `spares` are free or starting (within the size). */
  def topUp(): Unit = {
    val numbers = synchronized {
      if (closed || sc.isStopped) Nil else {
        // within the size: the reserve is started by the statement that may use it, when it
        // comes (a lone user who fills the pool does not start and stop one per statement)
        val n = math.max(0, math.min(spares - idle.size - starting, maxWorkers - total))
        starting += n
        (1 to n).map { _ => numbered += 1; numbered }
      }
    }
    numbers.foreach { number =>
      background("lance-compact-engine-start") {
        try {
          val w = startWorker(number)
          synchronized {
            // A new spare goes first in line, behind every worker that served: those are warm
            // (their Lance caches, allocators and code paths), and a spare is what a second
            // statement at once gets.
            if (closed) background("lance-compact-engine-stop")(w.stop()) else {
              idle.prepend(w)
              trimSurplus().foreach(x => background("lance-compact-engine-stop")(x.stop()))
            }
          }
        } catch {
          case e: Exception =>
            // the session ended while it started (its engine then says so too): no warning
            if (synchronized(closed) || sc.isStopped) logInfo(s"a spare lance_compact engine worker started as the session ended: ${e.getMessage}")
            else logWarning(s"starting a spare lance_compact engine worker failed: ${e.getMessage}")
        } finally synchronized { starting -= 1; notifyAll() }
      }
    }
  }

  private def startWorker(number: Int): EngineProcess = {
    val w = new EngineProcess(sc, python, logFile, number)
    try w.start() catch {
      case e: Throwable =>  // never left running unowned (e.g. its caller was interrupted meanwhile)
        try w.stop() catch { case _: Exception => () }
        throw e
    }
    w
  }

  /** Remove what a worker that died wrote and had not committed, through another worker. */
  private def discardLater(ended: EngineBridge.Ended): Unit = background("lance-compact-discard") {
    try {
      val request = Mapper.readTree(ended.request).asInstanceOf[ObjectNode]
      val discard = request.putObject("discard")
      // set's result type given: inferred as Nothing, the cast of its ObjectNode failed every time
      ended.staged.foreach { case (uri, paths) => discard.set[JsonNode](uri, Mapper.readTree(paths)) }
      call("discard_staged", Mapper.writeValueAsString(request))
      logInfo(s"removed the uncommitted files of ${ended.action} (its worker died)")
    } catch {
      case e: Exception => logWarning(s"removing the uncommitted files of ${ended.action} failed: ${e.getMessage}")
    }
  }

  /** The worker that served last (or any), started if there is none: for tests and diagnostics. */
  def any(): EngineProcess = {
    val found = synchronized(idle.filter(_.alive).lastOption.orElse(leased.find(_.alive)))
    found.getOrElse {
      val number = synchronized { numbered += 1; starting += 1; numbered }
      val w = try startWorker(number) finally synchronized(starting -= 1)
      synchronized(idle += w)
      w
    }
  }

  /** Each worker now: (pid, leased, statements served, its last table). */
  def workers(): Seq[(Long, Boolean, Int, String)] = synchronized {
    idle.map(w => (w.pid, false, w.served, w.lastTable)).toSeq ++ leased.map(w => (w.pid, true, w.served, w.lastTable))
  }

  /** [[workers]] as JSON (`[{"pid", "leased", "served", "table"}]`), for Python callers. */
  def workersJson(): String = {
    val list = Mapper.createArrayNode()
    workers().foreach { case (pid, isLeased, served, table) =>
      list.addObject().put("pid", pid).put("leased", isLeased).put("served", served).put("table", table)
    }
    Mapper.writeValueAsString(list)
  }

  /** Statements waiting for a worker now. */
  def queued: Int = synchronized(waiting.size)

  private[engine] def close(): Unit = {
    val all = synchronized {
      closed = true
      notifyAll()
      if (queueWatch != null) queueWatch.stop()
      val a = idle.toSeq ++ leased.toSeq
      idle.clear()
      a
    }
    all.foreach(w => try w.stop() catch { case _: Exception => () })
  }
}

object EnginePool extends Logging {
  val WorkersConf = "spark.lance.compact.engine.workers"
  val SparesConf = "spark.lance.compact.engine.spareWorkers"
  val MaxStatementsConf = "spark.lance.compact.engine.maxStatements"
  val ReserveConf = "spark.lance.compact.engine.reserveWorker"
  val WaitTimeoutConf = "spark.lance.compact.engine.waitTimeout"

  /** A statement waiting for a worker: whose it is, and whether it is short. */
  private final class Ticket(val user: String, val short: Boolean) {
    val id: String = s"lance-compact-waiting-${tickets.incrementAndGet()}"
    /** Why the statement was cancelled before its request was queued in a worker (else null). */
    @volatile var cancelled: String = null
  }
  private object Ticket { def apply(user: String, short: Boolean): Ticket = new Ticket(user, short) }
  private val tickets = new java.util.concurrent.atomic.AtomicLong()

  /** Actions that read metadata only and answer in about a second on a table (catalog reads,
   * metadata and system tables, a compaction's plan, a SELECT's plan): they may use the reserve
   * worker. No action that writes, builds or reads rows is among them. */
  val ShortActions: Set[String] = Set("describe", "namespace", "metadata", "table_health", "maintenance_history",
    "plan", "layout", "warehouse", "read_plan")

  private val ConnectUser = "SparkConnect_OperationTag_User_(.+)_Session_[^_]+_Operation_[^_]+".r

  /** The user a statement runs as: on a Thrift server the session's user (Spark runs it as that
   * user: a proxy of the server's login user, as the Lance tab names it), on a Connect server
   * the session's `user_id` (from the operation's job tag Spark Connect sets itself; a tag a user
   * adds is prefixed by Spark with their own name), else the application's user. It is the
   * identity the server authenticated, or was told: the pool trusts it as Spark does. */
  def userOf(sc: SparkContext): String = {
    val ugi = scala.util.Try(org.apache.hadoop.security.UserGroupInformation.getCurrentUser).toOption
    val proxied = ugi.filter(u => scala.util.Try(u.getRealUser != null ||
      u.getShortUserName != org.apache.hadoop.security.UserGroupInformation.getLoginUser.getShortUserName).getOrElse(false))
    proxied.map(_.getShortUserName).orElse {
      Option(sc.getLocalProperty("spark.job.tags")).toSeq.flatMap(_.split(",")).collectFirst {
        case ConnectUser(u) => s"connect:$u"
      }
    }.orElse(ugi.map(_.getShortUserName)).getOrElse(sc.sparkUser)
  }
  private val Mapper = new ObjectMapper()
  private var current: Option[EnginePool] = None

  /** The pool of the active session's SparkContext (made on first use; workers start as needed). */
  def of(spark: SparkSession): EnginePool = of(spark.sparkContext)

  /** The pool of `sc` (made on first use). */
  def of(sc: SparkContext): EnginePool = synchronized {
    // A thread may still hold a session of a stopped SparkContext as its active one (a warm-up
    // started by a catalog built there): it must never stop the live context's pool.
    if (sc.isStopped) throw new IllegalStateException("the session's SparkContext is stopped")
    current match {
      case Some(p) if p.sc eq sc => p
      case previous =>
        previous.foreach(_.close())
        val logFile = sc.getConf.getOption(EngineProcess.LogConf).filter(_.nonEmpty).map(new File(_)).getOrElse {
          val f = Files.createTempFile("lance-compact-engine-", ".log").toFile
          f.deleteOnExit()
          f
        }
        val p = new EnginePool(sc, EngineProcess.pythonExec(sc), logFile)
        sc.addSparkListener(new SparkListener {
          override def onApplicationEnd(end: SparkListenerApplicationEnd): Unit = p.close()
        })
        logInfo(s"lance_compact engine pool: up to ${p.maxWorkers} workers, ${p.spares} kept spare (log: $logFile)")
        StartJobAtExit.install(sc)  // a quiet exit while its first worker's start job runs
        current = Some(p)
        p
    }
  }

  /** Run `action` on a worker of `spark`'s pool. */
  def call(spark: SparkSession, action: String, requestJson: String): String = of(spark).call(action, requestJson)

  /** Start the spare workers ahead of the first call (in the background). Errors surface on the
   * first call. */
  def warmUp(spark: SparkSession): Unit = warmUp(spark.sparkContext)

  /** The same for `sc`, also while it is being made (the plugin's start: a worker waits for
   * the context to be ready before it uses it, EngineBridge.javaSparkContext). */
  def warmUp(sc: SparkContext): Unit = background("lance-compact-engine-warm-up") {
    try of(sc).topUp() catch { case e: Exception => logDebug("engine warm-up", e) }
  }

  /** The table location a request names ("" if none). */
  /** The request's table location (a worker that last read it is preferred; "" if none) and
   * "table db.t: " for a request of one table (what the pool's own errors start with, as the
   * engine's do; "" otherwise): one parse of the request. */
  private def tableAndSubject(requestJson: String): (String, String) =
    try {
      val r = Mapper.readTree(requestJson)
      def text(key: String) = Option(r.get(key)).filter(_.isTextual).map(_.asText).getOrElse("")
      (text("uri"), Option(text("table")).filter(_.nonEmpty).map(t => s"table $t: ").getOrElse(""))
    } catch { case _: Exception => ("", "") }

  private def background(name: String)(body: => Unit): Unit = {
    val t = new Thread(() => body, name)
    t.setDaemon(true)
    t.start()
  }

  sys.addShutdownHook(synchronized(current.foreach(_.close())))
}

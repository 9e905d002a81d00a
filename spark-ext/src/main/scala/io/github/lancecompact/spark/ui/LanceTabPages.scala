package io.github.lancecompact.spark.ui

import org.apache.spark.util.kvstore.KVStore

/** The Lance tab's pages over one status store (live, or the history server's for one
 * application); `live`: whether a cancel may be offered. */
object LanceTabPages {
  def pages(store: KVStore, live: Boolean): Seq[LanceCompactPage] =
    Seq(new WarehousePage(store), new RunningPage(store, live), new HistoryPage(store), new TablePage(store))

  /** Whether the application posted anything for the tab (the history server shows it only then). */
  def present(store: KVStore): Boolean =
    store.count(classOf[LanceStatementRecord]) + store.count(classOf[LanceTableHealthRecord]) +
      store.count(classOf[LanceLayoutRecord]) > 0
}

"""A user's own planning strategy, as in the README. Registered by whoever configures the
catalog, then chosen by name (docs/shared-servers.md):

    spark.sql.catalog.lance.strategies.skip_newest=my_planners.SkipNewest
    CALL lance.compact(table => 'db.events', strategy => 'skip_newest')
"""
from lance.optimize import Compaction

from lance_compact.compaction.planners import Planner


class SkipNewest(Planner):
    """Lance's plan, leaving the 10 newest fragments to the streaming writer."""

    name = "skip_newest"

    def plan(self, dataset, options):
        newest = sorted(f.fragment_id for f in dataset.get_fragments())[-10:]
        excluded = sorted(set(options.get("excluded_fragment_ids", [])) | set(newest))
        return Compaction.plan(dataset, {**options, "excluded_fragment_ids": excluded})


class DeletionsNow(Planner):
    """Lance's plan, running now only the tasks that remove deleted rows; plain merges of
    small fragments wait for a later run (``select``: which planned tasks run now)."""

    name = "deletions_now"

    def select(self, dataset, plan, options):
        for t in plan.tasks:  # PlannedTask: its fragments, rows and why Lance planned it
            if t.selected and t.deleted_rows == 0:
                t.selected = False
                t.reason += "; left for a later run: no deleted rows"
        return plan

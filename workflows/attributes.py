"""Search attributes jobforge keeps on every job workflow, and their Temporal types."""

from __future__ import annotations

from temporalio.common import SearchAttributeKey

STATUS = SearchAttributeKey.for_keyword("JobforgeStatus")
TYPE = SearchAttributeKey.for_keyword("JobforgeType")
PRIORITY = SearchAttributeKey.for_int("JobforgePriority")
WORKER = SearchAttributeKey.for_keyword("JobforgeWorker")
UPDATED_AT = SearchAttributeKey.for_datetime("JobforgeUpdatedAt")

ALL = (STATUS, TYPE, PRIORITY, WORKER, UPDATED_AT)

# The names the `temporal` CLI and operator service take when registering them.
REGISTRATION: dict[str, str] = {
    STATUS.name: "Keyword",
    TYPE.name: "Keyword",
    PRIORITY.name: "Int",
    WORKER.name: "Keyword",
    UPDATED_AT.name: "Datetime",
}

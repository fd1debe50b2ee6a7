"""Register jobforge's search attributes on a Temporal cluster (what the dev server gets
from flags)."""

from __future__ import annotations

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)

from engine.connection import TemporalSettings, connect
from workflows.search_attributes import REGISTRATION

KINDS = {
    "Keyword": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "Int": IndexedValueType.INDEXED_VALUE_TYPE_INT,
    "Datetime": IndexedValueType.INDEXED_VALUE_TYPE_DATETIME,
}


async def register_search_attributes(temporal: TemporalSettings) -> list[str]:
    """Add whichever of jobforge's search attributes are missing; returns their names."""
    client = await connect(temporal)
    existing = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=temporal.namespace)
    )
    present = set(existing.custom_attributes) | set(existing.system_attributes)
    missing = {name: KINDS[kind] for name, kind in REGISTRATION.items() if name not in present}
    if missing:
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(namespace=temporal.namespace, search_attributes=missing)
        )
    return sorted(missing)

"""Register jobforge's search attributes on a Temporal cluster (what the dev server gets
from flags). Connects as every other process does (`engine.connection.connect`), so a
TLS, mTLS or API-key cluster is reached with the same `TEMPORAL_*` settings."""

from __future__ import annotations

import asyncio
import time

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from engine.connection import TemporalSettings, connect
from workflows.search_attributes import REGISTRATION

KINDS = {
    "Keyword": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "Int": IndexedValueType.INDEXED_VALUE_TYPE_INT,
    "Datetime": IndexedValueType.INDEXED_VALUE_TYPE_DATETIME,
}

# A value of each kind, for a visibility query that names an attribute.
SAMPLES = {"Keyword": "''", "Int": "0", "Datetime": "'2000-01-01T00:00:00Z'"}
# How long added attributes may take to reach every part of the server (its caches).
USABLE_WITHIN_S = 90.0

# How a cluster that manages search attributes elsewhere says no: Temporal Cloud adds
# them through tcld, its UI or Terraform, not through the operator service.
REFUSED = (RPCStatusCode.PERMISSION_DENIED, RPCStatusCode.UNIMPLEMENTED)


class SearchAttributesRefusedError(Exception):
    """The cluster will not add search attributes for this client; the message names
    the missing ones and the tcld command that adds them on Temporal Cloud."""

    def __init__(self, namespace: str, missing: list[str], reason: str) -> None:
        flags = " ".join(f"--search-attribute {name}={REGISTRATION[name]}" for name in missing)
        super().__init__(
            f"the cluster refused to add {', '.join(missing)} ({reason}); on Temporal Cloud"
            f" run: tcld namespace search-attributes add --namespace {namespace} {flags}"
        )


async def register_search_attributes(temporal: TemporalSettings) -> list[str]:
    """Add whichever of jobforge's search attributes are missing; returns their names.

    Only the missing ones are sent, so once they exist (added here, or by tcld on
    Temporal Cloud) a rerun only reads.
    """
    client = await connect(temporal)
    existing = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=temporal.namespace)
    )
    present = set(existing.custom_attributes) | set(existing.system_attributes)
    missing = {name: KINDS[kind] for name, kind in REGISTRATION.items() if name not in present}
    if missing:
        try:
            await client.operator_service.add_search_attributes(
                AddSearchAttributesRequest(namespace=temporal.namespace, search_attributes=missing)
            )
        except RPCError as err:
            if err.status not in REFUSED:
                raise
            raise SearchAttributesRefusedError(
                temporal.namespace, sorted(missing), err.message
            ) from err
        await wait_until_usable(client, sorted(missing))
    return sorted(missing)


async def wait_until_usable(client: Client, names: list[str]) -> None:
    """Wait until a visibility query naming every one of `names` is accepted: a server
    reads added attributes into its caches a moment later, and a job started before
    then would be refused."""
    query = " AND ".join(f"{name} = {SAMPLES[REGISTRATION[name]]}" for name in names)
    deadline = time.monotonic() + USABLE_WITHIN_S
    while True:
        try:
            await client.count_workflows(query)
            return
        except RPCError as err:
            if err.status != RPCStatusCode.INVALID_ARGUMENT or time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.2)

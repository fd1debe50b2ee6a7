"""API tokens from one API replica's side: create, list and revoke them in the token
registry (workflows/token_registry.py), and check them against a copy of its table.

A token is `jf_` and 32 random bytes, url-safe base64. Only its SHA-256 is stored: a
fast hash is right for a secret with 256 bits of entropy (no guessing to slow down,
unlike a password). Checking one is a hash and a dict lookup on the replica's copy,
which a background task reads from the registry's memo every `refresh_s` (a describe:
the server answers it, no worker is needed) while tokens are being checked; a replica
that checked none for `IDLE_S` reads nothing until the next check. A copy read more
than `STALE_S` ago is not trusted: the replica reads again before it answers, and if
it cannot, token calls get a 503 (the bootstrap secret does not depend on the table).
So a token revoked anywhere is refused everywhere within `STALE_S`. Uses are counted
in memory and sent to the registry in one signal per `flush_s`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import secrets
import time
from collections.abc import Callable
from datetime import timedelta

from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from api.principal import BOOTSTRAP, Principal
from engine.clock import now_ms
from workflows.errors import (
    ErrorType,
    JobConflict,
    TemporalCallFailed,
    TemporalUnavailable,
    TokenNotFound,
)
from workflows.names import (
    CREATE_TOKEN_UPDATE,
    REVOKE_TOKEN_UPDATE,
    TOKEN_REGISTRY_WORKFLOW,
    TOKENS_MEMO,
    TOKENS_QUERY,
    TOKENS_USED_SIGNAL,
    token_registry_workflow_id,
)
from workflows.token_models import (
    Role,
    TokenEntry,
    TokenRecord,
    TokenRegistryInput,
    TokenTableMemo,
    TokenUses,
)

log = logging.getLogger("jobforge.api")

TOKEN_PREFIX = "jf_"
# 32 bytes in url-safe base64, unpadded.
TOKEN_LENGTH = len(TOKEN_PREFIX) + 43
# The longest a replica trusts its copy of the table: the revocation delay's bound.
STALE_S = 4.0
# A token the copy does not know waits for a read that began after it came, and reads
# begin at most this often for such misses: a token made on another replica a moment
# ago works at once, and forged ones cost at most two reads a second.
MISS_REREAD_S = 0.5
# The background reads pause after this long without a check (a replica that only sees
# the bootstrap secret, or no call, makes no read); the next check reads first, its copy
# being stale by then.
IDLE_S = 60.0
READ_TIMEOUT = timedelta(seconds=2)
# An update that reached the registry as it continued as new is sent again.
UPDATE_RETRIES = 5
UPDATE_RETRY_S = 0.05


def new_token() -> str:
    """A fresh secret: the prefix and 32 random bytes."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    """The SHA-256 of a token, hex: what the registry keeps."""
    return hashlib.sha256(token.encode()).hexdigest()


def _principal(entry: TokenEntry) -> Principal:
    return Principal(id=entry.id, name=entry.name, role=entry.role, tenant=entry.tenant)


class TokenTable:
    """One replica's copy of the token table, and its calls to the registry."""

    def __init__(
        self,
        client: Client,
        task_queue: str,
        bootstrap_secret: str,
        *,
        refresh_s: float = 2.0,
        flush_s: float = 30.0,
        idle_s: float = IDLE_S,
    ) -> None:
        self._client = client
        self._task_queue = task_queue
        self._id = token_registry_workflow_id(task_queue)
        self._bootstrap = bootstrap_secret.encode()
        self._refresh_s = refresh_s
        self._flush_s = flush_s
        self._idle_s = idle_s
        self._by_hash: dict[str, Principal] = {}
        self._by_id: dict[str, Principal] = {}
        self._read_at: float | None = None  # monotonic start of the last good read
        self._tried_at = 0.0  # monotonic start of the last read begun
        self._answered_at = 0.0  # monotonic start of the last read that ended
        # This replica's own creates and revokes, reapplied over a read that began
        # before them: (monotonic time, hash, principal or None when revoked).
        self._changes: list[tuple[float, str, Principal | None]] = []
        self._reading: asyncio.Task[None] | None = None
        self._used: dict[str, int] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._checked_at = -idle_s  # monotonic time of the last check against the copy
        self._checking = asyncio.Event()  # set by a check: the background reads resume

    # -- checking a token -------------------------------------------------------------

    async def resolve(self, token: str) -> Principal | None:
        """The principal a token stands for; None for one that is not (or no longer) a
        token. Raises `TemporalUnavailable` when the table cannot be read fresh."""
        if secrets.compare_digest(token.encode(), self._bootstrap):
            return BOOTSTRAP
        if len(token) != TOKEN_LENGTH or not token.startswith(TOKEN_PREFIX):
            return None  # not a token's shape: refused without the table
        digest = token_hash(token)
        principal = await self._lookup(lambda: self._by_hash.get(digest))
        if principal is not None:
            self._used[principal.id] = now_ms()
        return principal

    async def by_id(self, token_id: str) -> Principal | None:
        """The principal of a token id (a stream token names its token by id); None if
        the id is not a live token."""
        if token_id == BOOTSTRAP.id:
            return BOOTSTRAP
        return await self._lookup(lambda: self._by_id.get(token_id))

    async def _lookup(self, find: Callable[[], Principal | None]) -> Principal | None:
        """`find()` in a copy no older than `STALE_S`; on a miss, again in a read that
        began after it."""
        self._checked_at = time.monotonic()
        self._checking.set()
        if self._read_at is None or time.monotonic() - self._read_at > STALE_S:
            await self.refresh()
        principal = find()
        if principal is None:
            await self._read_since(time.monotonic())
            principal = find()
        return principal

    async def _read_since(self, asked_at: float) -> None:
        """Wait for a read that began at or after `asked_at` to end (whether it worked
        or not), starting one no sooner than `MISS_REREAD_S` after the previous."""
        while self._answered_at < asked_at:
            reading = self._reading
            if reading is None or reading.done():
                wait = self._tried_at + MISS_REREAD_S - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                    continue
            with contextlib.suppress(TemporalUnavailable):
                await self.refresh()

    async def refresh(self) -> None:
        """Read the table now (one read in flight at a time; callers share it)."""
        if self._reading is None or self._reading.done():
            self._reading = asyncio.create_task(self._read())
        try:
            await asyncio.shield(self._reading)
        except (RPCError, RuntimeError) as err:
            raise TemporalUnavailable(f"the token table cannot be read: {err}") from err

    async def _read(self) -> None:
        began = time.monotonic()
        self._tried_at = began
        try:
            await self._read_table(began)
        finally:
            self._answered_at = began

    async def _read_table(self, began: float) -> None:
        handle: WorkflowHandle[object, object] = self._client.get_workflow_handle(self._id)
        entries: list[TokenEntry] = []
        try:
            described = await handle.describe(rpc_timeout=READ_TIMEOUT)
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
        else:
            raw = await described.memo_value(TOKENS_MEMO, None)
            if raw is not None:
                entries = TokenTableMemo.model_validate(raw).tokens
        table = {entry.hash: _principal(entry) for entry in entries}
        self._changes = [change for change in self._changes if change[0] >= began]
        for _, digest, principal in self._changes:
            if principal is None:
                table.pop(digest, None)
            else:
                table[digest] = principal
        self._by_hash = table
        self._by_id = {principal.id: principal for principal in table.values()}
        self._read_at = began

    def _apply(self, digest: str, principal: Principal | None) -> None:
        self._changes.append((time.monotonic(), digest, principal))
        if principal is None:
            gone = self._by_hash.pop(digest, None)
            if gone is not None:
                self._by_id.pop(gone.id, None)
        else:
            self._by_hash[digest] = principal
            self._by_id[principal.id] = principal

    # -- the registry -------------------------------------------------------------------

    async def create(self, name: str, role: Role, tenant: str | None) -> tuple[TokenRecord, str]:
        """A new token: its record and the secret (which is not kept anywhere)."""
        token = new_token()
        record = TokenRecord(
            id=secrets.token_hex(6),
            name=name,
            role=role,
            tenant=tenant,
            hash=token_hash(token),
            created_at=now_ms(),
        )
        for retry in range(UPDATE_RETRIES + 1):
            start: WithStartWorkflowOperation[object, object] = WithStartWorkflowOperation(
                TOKEN_REGISTRY_WORKFLOW,
                TokenRegistryInput(),
                id=self._id,
                task_queue=self._task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                static_summary="API tokens",
            )
            try:
                created: TokenRecord = await self._client.execute_update_with_start_workflow(
                    CREATE_TOKEN_UPDATE,
                    record,
                    start_workflow_operation=start,
                    result_type=TokenRecord,
                )
            except WorkflowUpdateFailedError as err:
                if _failure_type(err) == ErrorType.TOKEN_LIMIT:
                    raise JobConflict(str(err.cause)) from err
                raise TemporalCallFailed(f"token create failed: {err.cause}") from err
            except RPCError as err:
                with contextlib.suppress(Exception):
                    await start.workflow_handle()
                if err.status != RPCStatusCode.FAILED_PRECONDITION or retry == UPDATE_RETRIES:
                    raise
                await asyncio.sleep(UPDATE_RETRY_S * 2**retry)
            else:
                self._apply(created.hash, _principal(created))
                return created, token
        raise AssertionError("unreachable")

    async def revoke(self, token_id: str) -> None:
        """Revoke a token; `TokenNotFound` for an id the registry does not hold."""
        handle: WorkflowHandle[object, object] = self._client.get_workflow_handle(self._id)
        for retry in range(UPDATE_RETRIES + 1):
            try:
                await handle.execute_update(REVOKE_TOKEN_UPDATE, token_id)
            except WorkflowUpdateFailedError as err:
                if _failure_type(err) == ErrorType.TOKEN_NOT_FOUND:
                    raise TokenNotFound(token_id) from err
                raise TemporalCallFailed(f"token revoke failed: {err.cause}") from err
            except RPCError as err:
                if err.status == RPCStatusCode.NOT_FOUND:
                    raise TokenNotFound(token_id) from err
                if err.status != RPCStatusCode.FAILED_PRECONDITION or retry == UPDATE_RETRIES:
                    raise
                await asyncio.sleep(UPDATE_RETRY_S * 2**retry)
            else:
                known = next((d for d, p in self._by_hash.items() if p.id == token_id), None)
                if known is not None:
                    self._apply(known, None)
                return

    async def records(self) -> list[TokenRecord]:
        """Every token, oldest first, with its last use (this replica's unsent uses
        included)."""
        handle: WorkflowHandle[object, object] = self._client.get_workflow_handle(self._id)
        try:
            found: list[TokenRecord] = await handle.query(
                TOKENS_QUERY, result_type=list[TokenRecord]
            )
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return []
            raise
        for record in found:
            mine = self._used.get(record.id)
            if mine is not None and (record.last_used_at is None or mine > record.last_used_at):
                record.last_used_at = mine
        return found

    async def flush_uses(self) -> None:
        """Send the uses counted since the last flush, in one signal."""
        if not self._used:
            return
        used, self._used = self._used, {}
        handle: WorkflowHandle[object, object] = self._client.get_workflow_handle(self._id)
        try:
            await handle.signal(TOKENS_USED_SIGNAL, TokenUses(used=used))
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return
            for token_id, at in used.items():  # kept for the next flush
                self._used[token_id] = max(at, self._used.get(token_id, 0))
            raise

    # -- the background tasks --------------------------------------------------------

    def start(self) -> None:
        """Keep the copy fresh and flush uses, until `stop`."""
        self._tasks = [
            asyncio.create_task(self._keep_fresh()),
            asyncio.create_task(self._keep_flushing()),
        ]

    async def stop(self) -> None:
        """Stop the tasks and send the uses still counted."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(RPCError):
            await self.flush_uses()

    async def _keep_fresh(self) -> None:
        failing = False
        while True:
            if time.monotonic() - self._checked_at > self._idle_s:
                self._checking.clear()
                await self._checking.wait()
                continue  # the check that woke this reads its stale copy itself
            try:
                await self.refresh()
            except Exception as err:  # the loop must outlive any one read
                if not failing:
                    log.warning("%s; trying again", err)
                failing = True
                await asyncio.sleep(min(0.5, self._refresh_s))
                continue
            if failing:
                log.info("the token table is read again")
            failing = False
            await asyncio.sleep(self._refresh_s)

    async def _keep_flushing(self) -> None:
        while True:
            await asyncio.sleep(self._flush_s)
            try:
                await self.flush_uses()
            except RPCError as err:
                log.warning("token uses not sent (sent with the next flush): %s", err.message)


def _failure_type(err: WorkflowUpdateFailedError) -> str | None:
    cause = err.cause
    return cause.type if isinstance(cause, ApplicationError) else None

"""TokenRegistry: the API tokens of one jobforge deployment, one long-lived workflow.

Tokens are created and revoked by update, so the caller learns at once that the
change is durable; each API replica reads the table from the memo (a describe: no
workflow task, no worker needed) every couple of seconds and checks tokens against its
own copy. Last use comes in batches by signal, one per replica now and then; it is
kept in the workflow's state, read by query, and changes no memo. The registry
continues as new, table and memo carried, before its history grows long.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from workflows.errors import ErrorType
    from workflows.names import (
        CREATE_TOKEN_UPDATE,
        REVOKE_TOKEN_UPDATE,
        TOKEN_REGISTRY_WORKFLOW,
        TOKENS_MEMO,
        TOKENS_QUERY,
        TOKENS_USED_SIGNAL,
    )
    from workflows.token_models import (
        TOKENS_MAX,
        TokenRecord,
        TokenRegistryInput,
        TokenTableMemo,
        TokenUses,
    )


@workflow.defn(name=TOKEN_REGISTRY_WORKFLOW)
class TokenRegistry:
    """Holds the tokens by id; the memo mirrors their entries after every change."""

    @workflow.init
    def __init__(self, inp: TokenRegistryInput) -> None:
        self._tokens = {token.id: token for token in inp.tokens}
        self._history_limit = inp.history_limit
        self._dirty = True

    @workflow.run
    async def run(self, inp: TokenRegistryInput) -> None:  # noqa: ARG002 - read in __init__
        while True:
            await workflow.wait_condition(lambda: self._dirty or self._should_continue())
            if self._dirty:
                self._dirty = False
                workflow.upsert_memo(self._memo())
            if self._should_continue():
                await workflow.wait_condition(workflow.all_handlers_finished)
                # The memo goes along: a replica that reads the new run before its first
                # task still sees every token.
                carried = TokenRegistryInput(
                    tokens=self.tokens(), history_limit=self._history_limit
                )
                workflow.continue_as_new(carried, memo=self._memo())

    def _memo(self) -> dict[str, object]:
        table = TokenTableMemo(tokens=[token.entry() for token in self.tokens()])
        return {TOKENS_MEMO: table.model_dump(mode="json")}

    def _should_continue(self) -> bool:
        info = workflow.info()
        return (
            info.is_continue_as_new_suggested()
            or info.get_current_history_length() > self._history_limit
        )

    @workflow.update(name=CREATE_TOKEN_UPDATE)
    def create(self, token: TokenRecord) -> TokenRecord:
        """Add a token (its id and hash are new: the validator says so)."""
        self._tokens[token.id] = token
        self._dirty = True
        return token

    @create.validator
    def _valid_create(self, token: TokenRecord) -> None:
        if token.id in self._tokens or any(t.hash == token.hash for t in self._tokens.values()):
            raise ValueError(f"token {token.id} exists already")
        if len(self._tokens) >= TOKENS_MAX:
            raise ApplicationError(
                f"the registry holds {TOKENS_MAX} tokens, its most; revoke some first",
                type=ErrorType.TOKEN_LIMIT.value,
                non_retryable=True,
            )

    @workflow.update(name=REVOKE_TOKEN_UPDATE)
    def revoke(self, token_id: str) -> None:
        """Remove a token: from the next refresh on, no replica accepts it."""
        del self._tokens[token_id]
        self._dirty = True

    @revoke.validator
    def _valid_revoke(self, token_id: str) -> None:
        if token_id not in self._tokens:
            raise ApplicationError(
                f"token {token_id} not found",
                type=ErrorType.TOKEN_NOT_FOUND.value,
                non_retryable=True,
            )

    @workflow.signal(name=TOKENS_USED_SIGNAL)
    def used(self, uses: TokenUses) -> None:
        """Last uses from one replica; the latest of each token's wins (replicas'
        batches may cross), and a revoked token's are dropped."""
        for token_id, at in uses.used.items():
            token = self._tokens.get(token_id)
            if token is not None and (token.last_used_at is None or at > token.last_used_at):
                token.last_used_at = at

    @workflow.query(name=TOKENS_QUERY)
    def tokens(self) -> list[TokenRecord]:
        """Every token, oldest first."""
        return sorted(self._tokens.values(), key=lambda token: (token.created_at, token.id))

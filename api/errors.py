"""One place that turns failures into HTTP answers."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from temporalio.service import RPCError, RPCStatusCode

log = logging.getLogger("jobforge.api")

UNAVAILABLE_CODES = frozenset(
    {RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED}
)


class ApiError(Exception):
    """An answer other than success: an HTTP status, a message, extra JSON fields."""

    def __init__(
        self,
        http_status: int,
        message: str,
        *,
        headers: dict[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(message)
        self.http_status = http_status
        self.message = message
        self.headers = headers
        self.extra = extra


def unauthorized() -> ApiError:
    """401 for a missing or wrong bearer token (with the challenge RFC 9110 requires)."""
    return ApiError(
        401,
        "missing or invalid bearer token (FORGE_INGEST_SECRET)",
        headers={"WWW-Authenticate": "Bearer"},
    )


def not_found(job_id: str) -> ApiError:
    """404 for an unknown job id."""
    return ApiError(404, f"job {job_id} not found", id=job_id)


def temporal_unavailable(detail: str) -> ApiError:
    """503 while Temporal cannot be reached."""
    return ApiError(503, f"Temporal is unavailable, try again: {detail}")


def is_unavailable(err: BaseException) -> bool:
    """Whether an exception means Temporal could not be reached."""
    if isinstance(err, RPCError):
        return err.status in UNAVAILABLE_CODES
    return isinstance(err, RuntimeError) and "connect" in str(err).lower()


def _field(loc: Sequence[Any], kind: object = None) -> str:
    if kind == "json_invalid":  # loc is ("body", <character offset>)
        return "body"
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    return ".".join(parts) or "body"


def _message(error: Any) -> str:
    message = str(error.get("msg", "invalid"))
    if error.get("type") == "json_invalid":
        ctx = error.get("ctx") or {}
        loc = error.get("loc", ())
        where = f" at character {loc[-1]}" if len(loc) > 1 else ""
        detail = f": {ctx['error']}" if ctx.get("error") else ""
        return f"{message}{detail}{where}"
    return message


def install(app: FastAPI) -> None:
    """Register the handlers on `app`."""

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, err: ApiError) -> JSONResponse:
        return JSONResponse(
            {"error": err.message, **err.extra}, status_code=err.http_status, headers=err.headers
        )

    @app.exception_handler(HTTPException)
    async def _http(_: Request, err: HTTPException) -> JSONResponse:
        # Starlette's own answers (404 route, 405, FastAPI's 400 for an unparsable
        # body) in the same {"error": ...} shape as everything else.
        return JSONResponse(
            {"error": str(err.detail)}, status_code=err.status_code, headers=err.headers
        )

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, err: RequestValidationError) -> JSONResponse:
        errors = err.errors()
        first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
        message = f"{_field(first.get('loc', ()), first.get('type'))}: {_message(first)}"
        detail = [
            {
                "field": _field(e.get("loc", ()), e.get("type")),
                "message": _message(e),
                "type": e.get("type"),
            }
            for e in errors
        ]
        return JSONResponse({"error": message, "detail": detail}, status_code=422)

    @app.exception_handler(RPCError)
    async def _rpc(_: Request, err: RPCError) -> JSONResponse:
        if err.status in UNAVAILABLE_CODES:
            return JSONResponse(
                {"error": f"Temporal is unavailable, try again: {err.message}"}, status_code=503
            )
        log.error("Temporal call failed: %s (%s)", err.message, err.status)
        return JSONResponse({"error": f"Temporal call failed: {err.message}"}, status_code=502)

    @app.exception_handler(RuntimeError)
    async def _runtime(_: Request, err: RuntimeError) -> JSONResponse:
        if is_unavailable(err):
            return JSONResponse(
                {"error": f"Temporal is unavailable, try again: {err}"}, status_code=503
            )
        log.exception("unexpected error", exc_info=err)
        return JSONResponse({"error": "internal error"}, status_code=500)

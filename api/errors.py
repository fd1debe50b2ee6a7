"""One place that turns failures into HTTP answers."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from temporalio.service import RPCError, RPCStatusCode

log = logging.getLogger("jobforge.api")

UNAVAILABLE_CODES = frozenset(
    {RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED}
)


class ApiError(Exception):
    """An answer other than success: an HTTP status, a message, extra JSON fields."""

    def __init__(self, http_status: int, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.http_status = http_status
        self.message = message
        self.extra = extra


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


def _field(loc: Sequence[Any]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    return ".".join(parts) or "body"


def install(app: FastAPI) -> None:
    """Register the handlers on `app`."""

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, err: ApiError) -> JSONResponse:
        return JSONResponse({"error": err.message, **err.extra}, status_code=err.http_status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, err: RequestValidationError) -> JSONResponse:
        errors = err.errors()
        first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
        message = f"{_field(first.get('loc', ()))}: {first.get('msg', 'invalid')}"
        detail = [
            {"field": _field(e.get("loc", ())), "message": e.get("msg"), "type": e.get("type")}
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

"""One place that turns failures into HTTP answers: the domain errors services raise
(workflows/errors.py), Temporal's own failures, and FastAPI's validation errors."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import ValidationError
from starlette.exceptions import HTTPException
from starlette.routing import Match, Route
from temporalio.service import RPCError, RPCStatusCode

from workflows.errors import (
    BulkNotFound,
    Forbidden,
    GateNotFound,
    GroupNotFound,
    HostNotAvailable,
    InvalidField,
    JobConflict,
    JobforgeError,
    JobGone,
    JobNotFound,
    LogStoreUnavailable,
    PoolFull,
    ScheduleNotFound,
    TemporalCallFailed,
    TemporalUnavailable,
    TenantForbidden,
    TokenNotFound,
    Unauthorized,
)
from workflows.host_models import WorkerNotFound

log = logging.getLogger("jobforge.api")

UNAVAILABLE_CODES = frozenset(
    {RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED}
)

# A 503 says when to come back (RFC 9110): Temporal restarts take seconds.
RETRY_AFTER = {"Retry-After": "1"}


# Each domain error's HTTP status, and headers its answer carries.
STATUS: dict[type[JobforgeError], int] = {
    InvalidField: 422,
    JobNotFound: 404,
    JobGone: 410,
    PoolFull: 429,
    GroupNotFound: 404,
    GateNotFound: 404,
    ScheduleNotFound: 404,
    BulkNotFound: 404,
    WorkerNotFound: 404,
    JobConflict: 409,
    Unauthorized: 401,
    Forbidden: 403,
    TokenNotFound: 404,
    HostNotAvailable: 403,
    TenantForbidden: 403,
    TemporalUnavailable: 503,
    TemporalCallFailed: 502,
    LogStoreUnavailable: 503,
}
HEADERS: dict[type[JobforgeError], dict[str, str]] = {
    # RFC 9110: a 401 names its scheme; a 503 says when to come back.
    Unauthorized: {"WWW-Authenticate": "Bearer"},
    TemporalUnavailable: RETRY_AFTER,
    LogStoreUnavailable: RETRY_AFTER,
}


def http_status(err: JobforgeError) -> int:
    """The status of a domain error (its class or the nearest base in the table)."""
    for cls in type(err).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500


def is_unavailable(err: BaseException) -> bool:
    """Whether an exception means Temporal could not be reached."""
    if isinstance(err, RPCError):
        return err.status in UNAVAILABLE_CODES
    return isinstance(err, RuntimeError) and "connect" in str(err).lower()


def no_workflow_worker(err: RPCError) -> bool:
    """A query or update that no workflow worker polls for: transient, not a bad gateway."""
    return "no poller seen" in err.message


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


def validation_problem(err: ValidationError) -> tuple[str, str]:
    """The field and message of a model's first validation error, as a 422 names them."""
    first = err.errors()[0]
    return _field(first.get("loc", ()), first.get("type")), _message(first)


def _allowed(request: Request) -> str:
    """Every method some route serves at this path.

    Starlette names only the first route that matched the path, and a path such as
    /api/jobs has one route per method, so its 405 `Allow` missed methods.
    """
    scope = {"type": "http", "path": request.url.path, "root_path": "", "method": "GET"}
    by_template: dict[str, set[str]] = {}
    pending = list(request.app.router.routes)
    while pending:
        route = pending.pop()
        inner = getattr(route, "original_router", None)  # an included router
        if inner is not None:
            pending.extend(inner.routes)
        elif isinstance(route, APIRoute | Route) and route.methods:
            match, _ = route.matches(scope)
            if match != Match.NONE:
                by_template.setdefault(route.path, set()).update(route.methods)
    if not by_template:
        return "GET, HEAD"
    # The resource is the most specific template that matches: /jobs/submit, not
    # /jobs/{job_id} with job_id "submit"; /targets/{t}/resume, not /targets/{t:path}.
    resource = max(by_template, key=_literal_length)
    return ", ".join(sorted(by_template[resource]))


def _literal_length(template: str) -> int:
    """How much of a path template is fixed text, not parameters."""
    return len(re.sub(r"\{[^}]*\}", "", template))


def install(app: FastAPI) -> None:
    """Register the handlers on `app`."""

    @app.exception_handler(JobforgeError)
    async def _domain(_: Request, err: JobforgeError) -> JSONResponse:
        status = http_status(err)
        if status >= 500:
            log.warning("%s: %s", type(err).__name__, err.message)
        headers = HEADERS.get(type(err))
        if isinstance(err, PoolFull):
            headers = {"Retry-After": str(err.retry_after_s)}
        return JSONResponse(
            {"error": err.message, **err.extra},
            status_code=status,
            headers=headers,
        )

    @app.exception_handler(HTTPException)
    async def _http(request: Request, err: HTTPException) -> JSONResponse:
        # Starlette's own answers (404 route, 405, FastAPI's 400 for an unparsable
        # body) in the same {"error": ...} shape as everything else.
        headers = err.headers
        message = str(err.detail)
        if err.status_code == 405:
            headers = {**(headers or {}), "Allow": _allowed(request)}
        if err.status_code == 413:
            limit = request.app.state.max_body_bytes
            message = f"request body is larger than {limit} bytes"
        return JSONResponse({"error": message}, status_code=err.status_code, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, err: RequestValidationError) -> JSONResponse:
        errors = err.errors()
        first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
        message = f"{_field(first.get('loc', ()), first.get('type'))}: {_message(first)}"
        if _body_not_json(request, first):
            message = (
                f"body: not sent as JSON (Content-Type is "
                f"{request.headers.get('content-type') or 'missing'}); "
                "send it with Content-Type: application/json"
            )
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
    async def _rpc(request: Request, err: RPCError) -> JSONResponse:
        if err.status in UNAVAILABLE_CODES or no_workflow_worker(err):
            return await _domain(request, TemporalUnavailable(err.message))
        return await _domain(request, TemporalCallFailed(f"Temporal call failed: {err.message}"))

    @app.exception_handler(RuntimeError)
    async def _runtime(request: Request, err: RuntimeError) -> JSONResponse:
        if is_unavailable(err):
            return await _domain(request, TemporalUnavailable(str(err)))
        log.exception("unexpected error", exc_info=err)
        return JSONResponse({"error": "internal error"}, status_code=500)


def _body_not_json(request: Request, error: Any) -> bool:
    """A body that failed validation because it was not sent as JSON (FastAPI then
    sees no body, or a string, where a JSON object belongs)."""
    if request.method not in ("POST", "PUT", "PATCH"):
        return False
    if tuple(error.get("loc", ()))[:1] != ("body",):
        return False
    length = request.headers.get("content-length", "")
    if not (length.isdigit() and int(length) > 0) and "transfer-encoding" not in request.headers:
        return False  # no body at all: "Field required" says it
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    return content_type != "application/json" and not content_type.endswith("+json")

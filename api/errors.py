"""One place that turns failures into HTTP answers."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.routing import Match, Route
from temporalio.service import RPCError, RPCStatusCode

log = logging.getLogger("jobforge.api")

UNAVAILABLE_CODES = frozenset(
    {RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED}
)

# A 503 says when to come back (RFC 9110): Temporal restarts take seconds.
RETRY_AFTER = {"Retry-After": "1"}


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
    return ApiError(503, f"Temporal is unavailable, try again: {detail}", headers=RETRY_AFTER)


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


def _allowed(request: Request) -> str:
    """Every method some route serves at this path.

    Starlette names only the first route that matched the path, and a path such as
    /api/jobs has one route per method, so its 405 `Allow` missed methods.
    """
    scope = {"type": "http", "path": request.url.path, "root_path": "", "method": "GET"}
    methods: set[str] = set()
    pending = list(request.app.router.routes)
    while pending:
        route = pending.pop()
        inner = getattr(route, "original_router", None)  # an included router
        if inner is not None:
            pending.extend(inner.routes)
        elif isinstance(route, APIRoute | Route) and route.methods:
            match, _ = route.matches(scope)
            if match != Match.NONE:
                methods |= route.methods
    return ", ".join(sorted(methods)) or "GET, HEAD"


def install(app: FastAPI) -> None:
    """Register the handlers on `app`."""

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, err: ApiError) -> JSONResponse:
        return JSONResponse(
            {"error": err.message, **err.extra}, status_code=err.http_status, headers=err.headers
        )

    @app.exception_handler(HTTPException)
    async def _http(request: Request, err: HTTPException) -> JSONResponse:
        # Starlette's own answers (404 route, 405, FastAPI's 400 for an unparsable
        # body) in the same {"error": ...} shape as everything else.
        headers = err.headers
        if err.status_code == 405:
            headers = {**(headers or {}), "Allow": _allowed(request)}
        return JSONResponse(
            {"error": str(err.detail)}, status_code=err.status_code, headers=headers
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
        if err.status in UNAVAILABLE_CODES or no_workflow_worker(err):
            return JSONResponse(
                {"error": f"Temporal is unavailable, try again: {err.message}"},
                status_code=503,
                headers=RETRY_AFTER,
            )
        log.error("Temporal call failed: %s (%s)", err.message, err.status)
        return JSONResponse({"error": f"Temporal call failed: {err.message}"}, status_code=502)

    @app.exception_handler(RuntimeError)
    async def _runtime(_: Request, err: RuntimeError) -> JSONResponse:
        if is_unavailable(err):
            return JSONResponse(
                {"error": f"Temporal is unavailable, try again: {err}"},
                status_code=503,
                headers=RETRY_AFTER,
            )
        log.exception("unexpected error", exc_info=err)
        return JSONResponse({"error": "internal error"}, status_code=500)


_ERROR_REF = {"$ref": "#/components/schemas/Error"}
_ERROR_SCHEMA: dict[str, Any] = {
    "title": "Error",
    "type": "object",
    "required": ["error"],
    "properties": {"error": {"type": "string"}},
    "additionalProperties": True,
}
_VALIDATION_SCHEMA: dict[str, Any] = {
    "title": "HTTPValidationError",
    "type": "object",
    "required": ["error"],
    "additionalProperties": True,
    "properties": {
        "error": {"type": "string"},
        "detail": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["field", "message", "type"],
                "properties": {
                    "field": {"type": "string"},
                    "message": {"type": "string"},
                    "type": {"type": "string"},
                },
            },
        },
    },
}


def document(app: FastAPI) -> None:
    """Make /openapi.json describe the error answers the handlers above really give.

    FastAPI documents its own 422 shape (`loc`/`msg`) and no other error; the API
    answers 422 as `{"error", "detail": [{"field", "message", "type"}]}`, and 401 on a
    route behind the token, 404/409 on a job's routes, 413 on a body over the limit,
    503 while Temporal is unreachable, all as `{"error": ...}`.
    """
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = build()
        schemas = schema.setdefault("components", {}).setdefault("schemas", {})
        schemas["HTTPValidationError"] = _VALIDATION_SCHEMA
        schemas.pop("ValidationError", None)
        schemas["Error"] = _ERROR_SCHEMA
        for path, item in schema.get("paths", {}).items():
            for method, operation in item.items():
                responses = operation.setdefault("responses", {})

                def add(code: str, description: str, responses: dict[str, Any] = responses) -> None:
                    responses.setdefault(
                        code,
                        {
                            "description": description,
                            "content": {"application/json": {"schema": _ERROR_REF}},
                        },
                    )

                if "requestBody" in operation:
                    add("400", "Body is not parseable")
                if operation.get("security"):
                    add("401", "Missing or invalid bearer token")
                if "{job_id}" in path:
                    add("404", "No such job")
                if method in ("post", "delete") and path.startswith("/api/jobs"):
                    add("409", "Conflicts with the job's state or an earlier request")
                if method in ("post", "put", "patch"):
                    add("413", "Body larger than MAX_BODY_BYTES")
                if path.startswith("/api/"):
                    add("503", "Temporal is unavailable; try again")
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]

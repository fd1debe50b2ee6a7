"""The OpenAPI document as the error handlers really answer (api/errors.py)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from api.job_batch import BatchItemSpec

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


def _batch_item(schemas: dict[str, Any]) -> None:
    """The schema of a batch's item (`BatchRequest.jobs` refers to it; the route reads
    items as plain JSON, so FastAPI does not list it)."""
    item = BatchItemSpec.model_json_schema(ref_template="#/components/schemas/{model}")
    for name, sub in item.pop("$defs", {}).items():
        schemas.setdefault(name, sub)
    schemas["BatchItemSpec"] = item


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
        _batch_item(schemas)
        for path, item in schema.get("paths", {}).items():
            # A batch answers each item's conflict in its 200, never as a whole.
            batch = path == "/api/jobs/batch"
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
                    add("401", "Missing, invalid or revoked bearer token")
                    add("403", "The token's role may not make this call")
                if "{job_id}" in path:
                    add("404", "No such job")
                if path.startswith("/api/groups/{group}") and method in ("get", "post"):
                    add("404", "No job ever named this group, and no setting was made for it")
                if path.startswith("/api/ops/jobs/"):
                    add("404", "No such job")
                    add("409", "The job has ended (fail), or cannot be re-queued in its state")
                if path.endswith("/requeue"):
                    add("410", "The job is past the namespace's retention: its record is gone")
                if path.startswith(("/api/groups/{", "/api/pools/{", "/api/targets/{")):
                    add("404", "No such gate in the caller's tenant (or a name with a line break)")
                if path.startswith("/api/schedules/{"):
                    add("404", "No such schedule in the caller's tenant")
                if path == "/api/jobs/bulk/{op_id}":
                    add("404", "No such bulk operation in the caller's tenant")
                if path == "/api/schedules" and method == "post":
                    add("409", "A schedule has this id already")
                if path == "/api/agent/job-status":
                    add("404", "No such job")
                    add("409", "Not a valid transition, or not this worker's job")
                if path.startswith(("/ops/jobs/", "/targets/{target_id}/jobs/")):
                    add("409", "The job's state does not allow it (see the message)")
                if path == "/job/{job_id}" and method == "delete":
                    add("409", "The job has not ended: stop it first")
                if path == "/stop/{job_id}":
                    add("409", "The job's state does not allow a stop (see the message)")
                if path.startswith("/api/targets/") and method == "post":
                    add("409", "The halting job can no longer be retried")
                if method in ("post", "delete") and path.startswith("/api/jobs") and not batch:
                    add("409", "Conflicts with the job's state or an earlier request")
                if method in ("post", "put", "patch"):
                    add("413", "Body larger than MAX_BODY_BYTES")
                if "logs" in path:
                    add("503", "Temporal or the job log store is unavailable; try again")
                if path.startswith("/api/"):
                    add("503", "Temporal is unavailable; try again")
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]

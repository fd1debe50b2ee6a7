"""The CLI's client of the jobforge API: settings, calls, the event stream.

"Hub" in its names is the 000 contract's word for the API: its address is `HUB_URL`.

Synchronous, one request at a time; every failure becomes a `HubError` whose message is
the one line the CLI prints.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal
from urllib.parse import quote

import httpx
from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from workflows.job_states import count_kind
from workflows.models import Job

# Where `jobforge dev` keeps the secret it generated (in its data dir).
SECRET_FILE_NAME = "ingest-secret"
EVENTS_PATH = "/api/jobs/events"
# The API's largest listing page (api/job_service.py LIST_LIMIT_MAX).
LIST_PAGE = 500
# Our clients drop a pooled connection idle this long, before the server closes it: a
# request sent on a connection the server closes at that moment is lost ("Server
# disconnected without sending a response"). The API keeps one for API_KEEPALIVE_S
# (75 s); 4 s is below uvicorn's own default too (5 s, as httpx's expiry).
KEEPALIVE_EXPIRY_S = 4.0
# Requests sent again, once, when the connection broke before an answer: reads, and a
# submit under an Idempotency-Key (the same key and body give the same job, once).
REPLAYABLE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
REPLAY_HEADER = "Idempotency-Key"


def pool_limits(connections: int | None = None) -> httpx.Limits:
    """Connection pool limits for a client of the API: httpx's own sizes (100 open, 20
    kept), or `connections` for both, with idle ones dropped after KEEPALIVE_EXPIRY_S."""
    return httpx.Limits(
        max_connections=connections or 100,
        max_keepalive_connections=connections or 20,
        keepalive_expiry=KEEPALIVE_EXPIRY_S,
    )


def replayable(method: str, headers: Mapping[str, str] | None) -> bool:
    """Whether sending the request twice does no harm (REPLAYABLE_METHODS, REPLAY_HEADER)."""
    return method.upper() in REPLAYABLE_METHODS or REPLAY_HEADER in httpx.Headers(headers)


class HubSettings(BaseSettings):
    """Where the API is and the bearer token for it (env HUB_URL, FORGE_INGEST_SECRET;
    JOBFORGE_URL and JOBFORGE_TOKEN are read where those are unset)."""

    model_config = SettingsConfigDict(extra="ignore")

    url: str = Field(
        default="http://127.0.0.1:8000", validation_alias=AliasChoices("HUB_URL", "JOBFORGE_URL")
    )
    secret: str = Field(
        default="", validation_alias=AliasChoices("FORGE_INGEST_SECRET", "JOBFORGE_TOKEN")
    )

    @property
    def base_url(self) -> str:
        """The URL without a trailing slash."""
        return self.url.rstrip("/")


class HubError(Exception):
    """A call to the API failed; the message says why, in one line. An API answer's
    `status`, the request `field` it names when it names one, and its JSON `body`."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        field: str | None = None,
        body: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.field = field
        self.body = body or {}


class HubUnreachableError(HubError):
    """The API did not answer (refused, timed out, or the connection broke)."""


class MissingSecretError(HubError):
    """FORGE_INGEST_SECRET is not set, so no call can be authorized."""

    def __init__(self) -> None:
        super().__init__(
            "FORGE_INGEST_SECRET is not set: export the API's secret "
            f"(`jobforge dev` keeps its own in <data dir>/{SECRET_FILE_NAME})"
        )


def status_label(job: dict[str, Any]) -> str:
    """A job's status as people read it and the counts file it: a cancelled job says
    `cancelled`, not `failed` (a status this client does not know reads as it is)."""
    status = str(job.get("status", ""))
    try:
        return count_kind(status, job.get("fail_reason"))
    except ValueError:
        return status


class HubClient:
    """Calls the API with the bearer token; answers of 400 and above raise `HubError`."""

    def __init__(self, settings: HubSettings, *, require_secret: bool = True) -> None:
        if require_secret and not settings.secret:
            raise MissingSecretError
        self._settings = settings
        headers = {"Authorization": f"Bearer {settings.secret}"} if settings.secret else {}
        self._http = httpx.Client(
            base_url=settings.base_url, headers=headers, timeout=30, limits=pool_limits()
        )

    def __enter__(self) -> HubClient:
        return self

    def __exit__(self, *_: object) -> None:
        self._http.close()

    def call(
        self, method: str, path: str, *, replay: bool = False, **kwargs: Any
    ) -> httpx.Response:
        """One request; an error answer or an unreachable API raises `HubError`. `replay`:
        sending it twice does no harm, whatever its method."""
        try:
            response = self._request(method, path, replay=replay, **kwargs)
        except httpx.HTTPError as err:
            raise HubUnreachableError(f"cannot reach {self._settings.base_url}: {err}") from err
        self._check(response)
        return response

    def _request(
        self, method: str, path: str, *, replay: bool = False, **kwargs: Any
    ) -> httpx.Response:
        try:
            return self._http.request(method, path, **kwargs)
        except (httpx.RemoteProtocolError, httpx.ReadError):
            # The connection broke before an answer, most often a pooled one the server
            # closed as the request went out (its keep-alive ran out). A request that
            # does no harm twice is sent again, once, on a new connection; any other
            # may have been carried out, so its caller hears of the failure.
            if not (replay or replayable(method, kwargs.get("headers"))):
                raise
            return self._http.request(method, path, **kwargs)

    def _check(self, response: httpx.Response) -> None:
        if response.status_code < 400:
            return
        if response.status_code == 401 and not self._settings.secret:
            raise MissingSecretError
        try:
            body = response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            body = {}
        message = body.get("error", response.text)
        # A domain error names its field; a validation error lists them, first first.
        field = body.get("field")
        detail = body.get("detail")
        if field is None and isinstance(detail, list) and detail and isinstance(detail[0], dict):
            field = detail[0].get("field")
        raise HubError(
            f"HTTP {response.status_code}: {message}",
            status=response.status_code,
            field=field if isinstance(field, str) else None,
            body=body,
        )

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.call(method, path, **kwargs).json()

    def submit(self, body: dict[str, Any], idempotency_key: str | None = None) -> str:
        """POST /api/jobs; the new job's id."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        job_id: str = self.call("POST", "/api/jobs", json=body, headers=headers).json()["id"]
        return job_id

    def submit_batch(self, jobs: list[dict[str, Any]], timeout_s: float) -> dict[str, Any]:
        """POST /api/jobs/batch: every item's answer (`results`, in order) and totals. Sent
        again, once, if the connection broke: items with an `id` make nothing twice."""
        answer: dict[str, Any] = self.call(
            "POST",
            "/api/jobs/batch",
            json={"jobs": jobs},
            timeout=timeout_s,
            replay=all("id" in job for job in jobs),
        ).json()
        return answer

    def job_json(self, job_id: str) -> dict[str, Any]:
        """GET /api/jobs/{id} as the API sent it."""
        body: dict[str, Any] = self.call("GET", f"/api/jobs/{job_id}").json()
        return body

    def job(self, job_id: str) -> Job:
        """GET /api/jobs/{id} as a model."""
        return Job.model_validate(self.job_json(job_id))

    def jobs(
        self,
        status: str | None,
        job_type: str | None,
        limit: int,
        order: str = "recent",
        *,
        filters: Mapping[str, str | None] | None = None,
        tenant: str | None = None,
    ) -> list[dict[str, Any]]:
        """GET /api/jobs, of one status if asked: a status, or `cancelled` (and `failed`
        leaves the cancelled jobs out), as the counts name them; `filters` are the API's
        other query filters (group, pool, target, worker; None: not asked), `tenant` an
        admin's `X-Tenant`. Up to `limit` jobs, page after page (the API cuts a page at
        500)."""
        query: dict[str, Any] = {"order": order}
        if status:
            query["status"] = status
        if job_type:
            query["type"] = job_type
        query.update({key: value for key, value in (filters or {}).items() if value is not None})
        pages = self.job_pages(query, min(limit, LIST_PAGE), tenant=tenant)
        return list(itertools.islice(pages, limit))

    def job_pages(
        self, query: dict[str, Any], page: int = LIST_PAGE, *, tenant: str | None = None
    ) -> Iterator[dict[str, Any]]:
        """Every job GET /api/jobs lists for `query` (its filters: status, type, pool,
        group, target, worker), `page` at a time, following `Next-Page-Token` to the
        end; of one `tenant` only when given (`X-Tenant`)."""
        params = {**query, "limit": page}
        headers = {"X-Tenant": tenant} if tenant is not None else None
        while True:
            response = self.call("GET", "/api/jobs", params=params, headers=headers)
            listed: list[dict[str, Any]] = response.json()
            yield from listed
            following = response.headers.get("Next-Page-Token")
            if not following or not listed:
                return
            params["page_token"] = following

    def cancel(self, job_id: str) -> None:
        """DELETE /api/jobs/{id}."""
        self.call("DELETE", f"/api/jobs/{job_id}")

    def ops(self, job_id: str, action: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """POST /api/ops/jobs/{id}/{requeue|fail|cancel}: the job after it."""
        job: dict[str, Any] = self._json("POST", f"/api/ops/jobs/{job_id}/{action}", json=body)
        return job

    def cleanup(self, body: dict[str, Any]) -> int:
        """POST /api/ops/cleanup; how many jobs were deleted."""
        deleted: int = self._json("POST", "/api/ops/cleanup", json=body)["deleted"]
        return deleted

    def stop(self, job_id: str) -> dict[str, Any]:
        """POST /api/jobs/{id}/stop: the job as the stop left it."""
        job: dict[str, Any] = self.call("POST", f"/api/jobs/{job_id}/stop").json()
        return job

    def logs(self, job_id: str, attempt: int | None = None, offset: int = 0) -> dict[str, Any]:
        """GET /api/jobs/{id}/logs: `{job_id, attempt, lines: [{stream, text}], next_offset}`
        of `attempt` (default: the current or last one) from byte `offset`."""
        query: dict[str, Any] = {"offset": offset}
        if attempt is not None:
            query["attempt"] = attempt
        body: dict[str, Any] = self._json("GET", f"/api/jobs/{job_id}/logs", params=query)
        return body

    def follow_logs(
        self, job_id: str, attempt: int | None = None
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """Follow GET /api/jobs/{id}/logs as server-sent events: `("log", {stream, text})`
        per line while the attempt runs, then `("end", {status})`."""
        params = {"follow": "1"} | ({"attempt": str(attempt)} if attempt is not None else {})
        timeout = httpx.Timeout(30, read=None)
        try:
            with self._http.stream(
                "GET",
                f"/api/jobs/{job_id}/logs",
                params=params,
                headers={"Accept": "text/event-stream"},
                timeout=timeout,
            ) as response:
                if response.status_code >= 400:
                    response.read()
                    self._check(response)
                for name, _, data in server_sent_events(response.iter_lines()):
                    yield name, data
        except httpx.HTTPError as err:
            raise HubUnreachableError(f"log stream from {self._settings.base_url}: {err}") from err

    # -- scheduling: groups, pools, serial targets ------------------------------------

    def groups(self) -> list[dict[str, Any]]:
        """GET /api/groups."""
        listed: list[dict[str, Any]] = self._json("GET", "/api/groups")
        return listed

    def group(self, name: str) -> dict[str, Any]:
        """GET /api/groups/{group}: `{group, paused, max_parallel, weight, counts}`."""
        group: dict[str, Any] = self._json("GET", _path("groups", name))
        return group

    def configure_group(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """PATCH /api/groups/{group} with `max_parallel` (null lifts it) and/or `weight`."""
        group: dict[str, Any] = self._json("PATCH", _path("groups", name), json=patch)
        return group

    def pause_group(self, name: str, *, paused: bool = True) -> dict[str, Any]:
        """POST /api/groups/{group}/pause, or /resume when `paused` is false."""
        action = "pause" if paused else "resume"
        group: dict[str, Any] = self._json("POST", _path("groups", name, action))
        return group

    def retry_failed(self, name: str) -> list[str]:
        """POST /api/groups/{group}/retry-failed; the ids of the jobs queued again."""
        requeued: list[str] = self._json("POST", _path("groups", name, "retry-failed"))["requeued"]
        return requeued

    def cancel_group(self, name: str) -> list[str]:
        """POST /api/groups/{group}/cancel; the ids of the jobs cancelled."""
        cancelled: list[str] = self._json("POST", _path("groups", name, "cancel"))["cancelled"]
        return cancelled

    def pools(self) -> list[dict[str, Any]]:
        """GET /api/pools."""
        listed: list[dict[str, Any]] = self._json("GET", "/api/pools")
        return listed

    def pool(self, name: str) -> dict[str, Any]:
        """GET /api/pools/{pool}: `{pool, capacity, in_use, pending, running}`."""
        pool: dict[str, Any] = self._json("GET", _path("pools", name))
        return pool

    def set_pool_capacity(
        self, name: str, capacity: int, settings: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """PUT /api/pools/{pool} with `{capacity}` and `settings` (`aging_step_s`)."""
        body = {"capacity": capacity, **(settings or {})}
        pool: dict[str, Any] = self._json("PUT", _path("pools", name), json=body)
        return pool

    def lock_pool(self, name: str, owner: str, ttl_s: float) -> dict[str, Any]:
        """POST /api/pools/{pool}/lock: take or renew its lock, `{owner, since,
        renewed_at, expires_at}`; held by another owner, a HubError 409 whose body names
        it (`owner`, `since`, `expires_at`)."""
        body = {"owner": owner, "ttl_s": ttl_s}
        lock: dict[str, Any] = self._json("POST", _path("pools", name, "lock"), json=body)
        return lock

    def unlock_pool(self, name: str, owner: str) -> None:
        """DELETE /api/pools/{pool}/lock: give it back if `owner` holds it."""
        self.call("DELETE", _path("pools", name, "lock"), params={"owner": owner})

    def targets(self) -> list[dict[str, Any]]:
        """GET /api/targets."""
        listed: list[dict[str, Any]] = self._json("GET", "/api/targets")
        return listed

    def workers(self) -> list[dict[str, Any]]:
        """GET /api/workers: the fleet, with liveness and the jobs each holds now."""
        listed: list[dict[str, Any]] = self._json("GET", "/api/workers")
        return listed

    def target(self, name: str) -> dict[str, Any]:
        """GET /api/targets/{target}: `{target, halted, halted_by, running, pending}`."""
        target: dict[str, Any] = self._json("GET", _target_path(name))
        return target

    def resume_target(self, name: str, job: Literal["retry", "skip"]) -> dict[str, Any]:
        """POST /api/targets/{target}/resume: the halting job is re-queued or skipped."""
        target: dict[str, Any] = self._json("POST", _target_path(name, "resume"), json={"job": job})
        return target

    def create_token(self, name: str, role: str, tenant: str | None) -> dict[str, Any]:
        """POST /api/tokens: `{id, token, name, role, tenant, created_at}`; the token is
        in this answer only."""
        body = {"name": name, "role": role, "tenant": tenant}
        created: dict[str, Any] = self._json("POST", "/api/tokens", json=body)
        return created

    def tokens(self) -> list[dict[str, Any]]:
        """GET /api/tokens: every live token, without secrets."""
        listed: list[dict[str, Any]] = self._json("GET", "/api/tokens")
        return listed

    def revoke_token(self, token_id: str) -> None:
        """DELETE /api/tokens/{id}."""
        self.call("DELETE", _path("tokens", token_id))

    def events(
        self,
        statuses: list[str],
        types: list[str],
        last_event_id: str | None = None,
        on_open: Callable[[], None] | None = None,
    ) -> Iterator[tuple[str, str, dict[str, Any]]]:
        """Follow GET /api/jobs/events: (event name, event id, data) until the stream
        ends. `on_open()` is called once the API has answered."""
        params = httpx.QueryParams(
            [*(("status", s) for s in statuses), *(("type", t) for t in types)]
        )
        headers = {"Last-Event-ID": last_event_id} if last_event_id else {}
        timeout = httpx.Timeout(30, read=None)
        try:
            with self._http.stream(
                "GET", EVENTS_PATH, params=params, headers=headers, timeout=timeout
            ) as response:
                if response.status_code >= 400:
                    response.read()
                    self._check(response)
                if on_open is not None:
                    on_open()
                yield from server_sent_events(response.iter_lines())
        except httpx.HTTPError as err:
            raise HubUnreachableError(
                f"event stream from {self._settings.base_url}: {err}"
            ) from err


def _path(collection: str, name: str, *action: str) -> str:
    # A name is one path segment: a "/" or "?" in it must not reach another route.
    return "/".join(("/api", collection, quote(name, safe=""), *action))


def _target_path(name: str, *action: str) -> str:
    # A target may be `tenant/name`: its one "/" stays a path separator.
    return "/".join(("/api/targets", quote(name, safe="/"), *action))


class SseParser:
    """text/event-stream lines in, one at a time; each complete event out as (event, id,
    JSON data). Comments and unknown fields are skipped."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._name, self._id, self._data = "message", "", list[str]()

    def feed(self, line: str) -> tuple[str, str, dict[str, Any]] | None:
        """The event that this line (an empty one) completes, if any."""
        if not line:
            event = (
                (self._name, self._id, json.loads("\n".join(self._data))) if self._data else None
            )
            self._reset()
            return event
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            self._name = value
        elif field == "id":
            self._id = value
        elif field == "data":
            self._data.append(value)
        return None


def server_sent_events(lines: Iterator[str]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """Parse text/event-stream lines into (event, id, JSON data); comments are skipped."""
    parser = SseParser()
    for line in lines:
        if (event := parser.feed(line)) is not None:
            yield event

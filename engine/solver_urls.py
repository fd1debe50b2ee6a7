"""The solver-URL policy as both the API (at submit) and the workers (per download
hop) apply it: settings, and the host check that resolves names. The pure checks are
in `workflows/url_policy.py`."""

from __future__ import annotations

import asyncio
import socket
from urllib.parse import urlsplit

from pydantic_settings import BaseSettings, SettingsConfigDict

from workflows.url_policy import literal_ip, parse_schemes, private_address, url_shape_problem


class SolverUrlSettings(BaseSettings):
    """Which solver URLs are allowed (env `SOLVER_URL_SCHEMES`,
    `SOLVER_ALLOW_PRIVATE_NETWORKS`)."""

    model_config = SettingsConfigDict(env_prefix="SOLVER_", extra="ignore")

    url_schemes: str = "https"
    allow_private_networks: bool = False

    @property
    def schemes(self) -> frozenset[str]:
        """The allowed URL schemes as a set."""
        return parse_schemes(self.url_schemes)


class SolverUrlRefused(Exception):  # noqa: N818 - a refusal, not a fault
    """A solver URL the policy refuses; the message says why. `transient` marks a
    failure that may pass on a later try (a name that did not resolve)."""

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.transient = transient


def url_problem(url: str, schemes: frozenset[str]) -> str | None:
    """Why `url` is refused on its face (scheme, host, credentials, port), or None."""
    problem = url_shape_problem(url, schemes)
    if problem is not None:
        return problem
    try:
        urlsplit(url).port  # noqa: B018 - raises on a port that is not a number in range
    except ValueError as err:
        return f"solver_url has a bad port: {err}"
    return None


async def check_host(url: str, allow_private: bool) -> None:
    """Raise SolverUrlRefused when `url`'s host is, or resolves to, a non-public
    address (unless `allow_private`)."""
    host = urlsplit(url).hostname
    if allow_private or host is None:
        return
    literal = literal_ip(host)
    if literal is not None:
        addresses = [literal]
    else:
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, None, type=socket.SOCK_STREAM
            )
        except (OSError, UnicodeError) as err:  # UnicodeError: not a valid host name
            raise SolverUrlRefused(
                f"solver_url host {host} does not resolve: {err}", transient=True
            ) from err
        addresses = [str(info[4][0]) for info in infos]
    bad = private_address(addresses)
    if bad is not None:
        raise SolverUrlRefused(
            f"solver_url host {host} is a private or loopback address ({bad}); "
            "set SOLVER_ALLOW_PRIVATE_NETWORKS=true to allow it"
        )

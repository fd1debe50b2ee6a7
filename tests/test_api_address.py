"""Where the CLI, the agent and runforge-cli find the API (worker/hub_client.HubSettings):
HUB_URL and FORGE_INGEST_SECRET, the names docs/cli.md documents; JOBFORGE_URL and
JOBFORGE_TOKEN, which earlier pages exported, stand in where those are unset. Pure."""

from __future__ import annotations

import pytest

from worker.hub_client import HubSettings

NAMES = ("HUB_URL", "FORGE_INGEST_SECRET", "JOBFORGE_URL", "JOBFORGE_TOKEN")


def address(monkeypatch: pytest.MonkeyPatch, **env: str) -> tuple[str, str]:
    """The API's URL and the token the settings read from exactly `env`."""
    for name in NAMES:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = HubSettings()
    return settings.base_url, settings.secret


def test_hub_url_and_the_ingest_secret_name_the_api(monkeypatch: pytest.MonkeyPatch) -> None:
    found = address(monkeypatch, HUB_URL="http://api.example:8000/", FORGE_INGEST_SECRET="s3")

    assert found == ("http://api.example:8000", "s3")


def test_jobforge_url_and_token_stand_in_where_the_documented_names_are_unset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    found = address(monkeypatch, JOBFORGE_URL="http://other.example:9000", JOBFORGE_TOKEN="t0")

    assert found == ("http://other.example:9000", "t0")


def test_the_documented_names_win_where_both_are_set(monkeypatch: pytest.MonkeyPatch) -> None:
    both = dict(zip(NAMES, ("http://hub:1", "first", "http://other:2", "second"), strict=True))

    assert address(monkeypatch, **both) == ("http://hub:1", "first")


def test_with_neither_the_api_is_the_local_default_and_no_secret_is_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert address(monkeypatch) == ("http://127.0.0.1:8000", "")

"""Where the CLI, the agent and runforge-cli find the API (worker/hub_client.HubSettings):
HUB_URL and FORGE_INGEST_SECRET, the names docs/cli.md documents; JOBFORGE_URL and
JOBFORGE_TOKEN, which earlier pages exported, stand in where those are unset. Pure."""

from __future__ import annotations

import pytest

from worker.hub_client import HubSettings

NAMES = ("HUB_URL", "FORGE_INGEST_SECRET", "JOBFORGE_URL", "JOBFORGE_TOKEN")


@pytest.fixture(autouse=True)
def _no_address(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in NAMES:
        monkeypatch.delenv(name, raising=False)


def test_hub_url_and_the_ingest_secret_name_the_api() -> None:
    with pytest.MonkeyPatch.context() as env:
        env.setenv("HUB_URL", "http://api.example:8000/")
        env.setenv("FORGE_INGEST_SECRET", "s3cret")
        settings = HubSettings()

    assert (settings.base_url, settings.secret) == ("http://api.example:8000", "s3cret")


def test_jobforge_url_and_token_stand_in_where_the_documented_names_are_unset() -> None:
    with pytest.MonkeyPatch.context() as env:
        env.setenv("JOBFORGE_URL", "http://other.example:9000")
        env.setenv("JOBFORGE_TOKEN", "t0ken")
        settings = HubSettings()

    assert (settings.base_url, settings.secret) == ("http://other.example:9000", "t0ken")


def test_the_documented_names_win_where_both_are_set() -> None:
    with pytest.MonkeyPatch.context() as env:
        for name, value in zip(
            NAMES, ("http://hub:1", "first", "http://other:2", "second"), strict=True
        ):
            env.setenv(name, value)
        settings = HubSettings()

    assert (settings.base_url, settings.secret) == ("http://hub:1", "first")


def test_with_neither_the_api_is_the_local_default_and_no_secret_is_sent() -> None:
    settings = HubSettings()

    assert (settings.base_url, settings.secret) == ("http://127.0.0.1:8000", "")

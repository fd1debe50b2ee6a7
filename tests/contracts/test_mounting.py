"""Each design's routes are on by default behind the bearer token, and can be turned off
(`JOBFORGE_CONTRACTS`), opened (`CONTRACT_AUTH_<NNN>=none`) or moved under a prefix
(`CONTRACT_PREFIX_<NNN>`)."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from api.contract_settings import ContractSettings
from tests.conftest import Api
from workflows.contract_states import STATE_NAMES, Phase, names

TENANT = {"X-Tenant": "acme"}


def test_the_designs_routes_answer_behind_the_token_by_default(api: Api) -> None:
    assert api.http.get("/targets/site-1/jobs", headers=TENANT).status_code == 200
    bare = httpx.get(f"{api.url}/targets/site-1/jobs", headers=TENANT, timeout=10)
    assert bare.status_code == 401


def test_a_design_turned_off_is_not_served_and_one_opened_under_a_prefix_needs_no_token(
    start_api: Callable[..., Api],
) -> None:
    off = start_api(JOBFORGE_CONTRACTS="000,001")
    opened = start_api(CONTRACT_AUTH_004="none", CONTRACT_PREFIX_004="/legacy")
    try:
        assert off.http.get("/targets/site-1/jobs", headers=TENANT).status_code == 404
        # The hub's own routes stay.
        assert off.http.get("/api/jobs", params={"type": "no-such-type"}).status_code == 200

        moved = httpx.get(f"{opened.url}/legacy/targets/site-1/jobs", headers=TENANT, timeout=10)
        assert moved.status_code == 200
        assert opened.http.get("/targets/site-1/jobs", headers=TENANT).status_code == 404
        # Opening one design opens nothing else.
        assert httpx.get(f"{opened.url}/api/jobs", timeout=10).status_code == 401
    finally:
        off.proc.stop(timeout=15)
        opened.proc.stop(timeout=15)


@pytest.mark.parametrize(
    ("env", "field"),
    [
        ({"JOBFORGE_CONTRACTS": "000,042"}, "JOBFORGE_CONTRACTS"),
        ({"CONTRACT_AUTH_004": "maybe"}, "CONTRACT_AUTH_004"),
        ({"CONTRACT_PREFIX_004": "legacy/"}, "CONTRACT_PREFIX_004"),
    ],
)
def test_a_bad_contract_setting_is_refused_naming_it(
    env: dict[str, str], field: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=field):
        ContractSettings()


def test_the_state_table_names_every_phase_in_every_design() -> None:
    assert set(STATE_NAMES) == set(Phase)
    assert names("004") == ["QUEUED", "RUNNING", "SUCCESS", "ERROR", "CANCELED", "PAUSED"]
    assert names("000") == ["pending", "assigned", "running", "completed", "quarantined", "failed"]

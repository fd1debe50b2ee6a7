"""The job model and the solver URL policy, without any process or server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from temporalio.contrib.pydantic import pydantic_data_converter

import workflows
from api.settings import ApiSettings
from engine.connection import DATA_CONVERTER, SharedPydanticConverter
from worker.devserver import DYNAMIC_CONFIG
from workflows.models import (
    MAX_RUNTIME_MS_LIMIT,
    PARAMS_MAX_BYTES,
    PARAMS_MAX_DEPTH,
    PRIORITY_LEVELS,
    Job,
    JobInput,
    JobSpec,
    pending_job,
    priority_key,
    priority_range,
)
from workflows.url_policy import parse_schemes, private_address, url_shape_problem

ROOT = Path(__file__).resolve().parent.parent
CHECKSUM = "ab" * 32
HTTPS = frozenset({"https"})


def rejected_fields(**spec: Any) -> list[str]:
    """The fields pydantic blames when it rejects `spec` (model-level errors as "")."""
    with pytest.raises(ValidationError) as caught:
        JobSpec.model_validate(spec)
    return [".".join(str(p) for p in error["loc"][:1]) for error in caught.value.errors()]


def nested(depth: int) -> dict[str, Any]:
    """A params object that is `depth` levels deep, counting itself."""
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def test_the_workflows_package_is_this_repository_not_the_unrelated_pypi_one() -> None:
    assert Path(workflows.__file__).resolve().is_relative_to(ROOT)


def test_a_minimal_spec_gets_the_documented_defaults() -> None:
    spec = JobSpec.model_validate({"type": "demo"})

    assert spec.params == {}
    assert spec.priority == 0
    assert spec.max_attempts == 3
    assert spec.max_runtime_ms == 300_000
    assert spec.solver_url is None
    assert spec.solver_checksum is None


@pytest.mark.parametrize("job_type", ["a", "A9", "solver.v2_x-y", "x" * 64])
def test_types_of_letters_digits_dots_dashes_and_underscores_are_accepted(job_type: str) -> None:
    assert JobSpec.model_validate({"type": job_type}).type == job_type


@pytest.mark.parametrize(
    "job_type",
    ["", "x" * 65, "a b", "a/b", "-leading-dash", ".hidden", "é", "abc\n", "a'b", "a;b"],
)
def test_an_empty_too_long_or_oddly_spelled_type_is_rejected(job_type: str) -> None:
    assert rejected_fields(type=job_type) == ["type"]


@pytest.mark.parametrize("params", [[1, 2], "text", 3, None, True])
def test_params_that_are_not_an_object_are_rejected(params: Any) -> None:
    assert rejected_fields(type="a", params=params) == ["params"]


def test_params_may_nest_exactly_the_maximum_depth_but_not_one_more() -> None:
    assert JobSpec.model_validate({"type": "a", "params": nested(PARAMS_MAX_DEPTH)})

    assert rejected_fields(type="a", params=nested(PARAMS_MAX_DEPTH + 1)) == ["params"]


def test_params_nested_far_beyond_the_limit_are_rejected_as_params() -> None:
    assert rejected_fields(type="a", params=nested(5000))[0] == "params"


def test_params_over_64_kib_as_json_are_rejected() -> None:
    filler = "x" * (PARAMS_MAX_BYTES - len('{"s":""}'))
    assert JobSpec.model_validate({"type": "a", "params": {"s": filler}})

    assert rejected_fields(type="a", params={"s": filler + "x"}) == ["params"]


def test_the_params_size_limit_counts_utf8_bytes_not_escaped_characters() -> None:
    # 20 000 two-byte characters: 40 KB as UTF-8 JSON, 120 KB if written as \\u escapes.
    params = {"s": "é" * 20_000}

    spec = JobSpec.model_validate({"type": "a", "params": params})

    assert len(json.dumps(spec.params, ensure_ascii=False).encode()) < PARAMS_MAX_BYTES
    assert spec.params == params


def test_params_that_cannot_be_written_as_json_are_rejected() -> None:
    assert rejected_fields(type="a", params={"x": float("nan")}) == ["params"]
    assert rejected_fields(type="a", params={"x": float("inf")}) == ["params"]
    assert rejected_fields(type="a", params={"s": "\ud800"}) == ["params"]


@pytest.mark.parametrize("attempts", [0, 101, -1])
def test_max_attempts_outside_1_to_100_is_rejected(attempts: int) -> None:
    assert rejected_fields(type="a", max_attempts=attempts) == ["max_attempts"]


@pytest.mark.parametrize("attempts", [1, 100])
def test_max_attempts_of_1_and_100_are_accepted(attempts: int) -> None:
    assert JobSpec.model_validate({"type": "a", "max_attempts": attempts}).max_attempts == attempts


@pytest.mark.parametrize("field", ["max_attempts", "max_runtime_ms", "priority"])
@pytest.mark.parametrize("value", [True, "5", 2.5])
def test_integer_fields_take_integers_only_not_booleans_strings_or_fractions(
    field: str, value: Any
) -> None:
    assert rejected_fields(type="a", **{field: value}) == [field]


@pytest.mark.parametrize("runtime", [99, 0, -1, MAX_RUNTIME_MS_LIMIT + 1])
def test_max_runtime_ms_outside_its_bounds_is_rejected(runtime: int) -> None:
    assert rejected_fields(type="a", max_runtime_ms=runtime) == ["max_runtime_ms"]


@pytest.mark.parametrize("runtime", [100, MAX_RUNTIME_MS_LIMIT])
def test_max_runtime_ms_at_its_bounds_is_accepted(runtime: int) -> None:
    spec = JobSpec.model_validate({"type": "a", "max_runtime_ms": runtime})
    assert spec.max_runtime_ms == runtime


@pytest.mark.parametrize(
    "checksum", ["", "ab" * 31, "ab" * 33, "g" * 64, CHECKSUM + "\n", " " + CHECKSUM[1:]]
)
def test_a_solver_checksum_that_is_not_64_hex_characters_is_rejected(checksum: str) -> None:
    fields = rejected_fields(type="a", solver_url="https://x.test/s", solver_checksum=checksum)
    assert fields == ["solver_checksum"]


def test_a_solver_url_without_a_checksum_is_rejected_naming_the_checksum() -> None:
    with pytest.raises(ValidationError) as caught:
        JobSpec.model_validate({"type": "a", "solver_url": "https://x.test/s"})

    assert "solver_checksum is required" in str(caught.value)


def test_a_solver_url_longer_than_2048_characters_is_rejected() -> None:
    url = "https://x.test/" + "a" * 2048
    assert rejected_fields(type="a", solver_url=url, solver_checksum=CHECKSUM) == ["solver_url"]


def test_the_solver_checksum_is_normalised_to_lowercase() -> None:
    spec = JobSpec.model_validate(
        {"type": "a", "solver_url": "https://x.test/s", "solver_checksum": CHECKSUM.upper()}
    )
    assert spec.solver_checksum == CHECKSUM


def test_unknown_fields_are_rejected() -> None:
    assert rejected_fields(type="a", colour="red") == ["colour"]


@pytest.mark.parametrize(
    ("priority", "key"),
    [
        (1_000_000, 1),
        (30, 1),
        (29, 1),
        (28, 2),
        (9, 21),
        (2, 28),
        (1, 29),
        (0, 30),
        (-1, 31),
        (-29, 59),
        (-30, 59),
        (-1_000_000, 59),
    ],
)
def test_each_priority_within_29_has_its_own_temporal_key_and_beyond_shares_the_end_key(
    priority: int, key: int
) -> None:
    assert priority_key(priority, 59) == key


@pytest.mark.parametrize(
    ("levels", "served"),
    [(59, (-29, 29)), (60, (-30, 29)), (5, (-2, 2)), (2, (-1, 0)), (1, (0, 0))],
)
def test_the_exact_range_puts_priority_0_on_the_servers_default_key(
    levels: int, served: tuple[int, int]
) -> None:
    low, high = priority_range(levels)
    assert (low, high) == served
    keys = [priority_key(p, levels) for p in range(high, low - 1, -1)]
    # One key per priority, highest priority on key 1; 0 on Temporal's default key.
    assert keys == list(range(1, levels + 1))
    assert priority_key(0, levels) == (levels + 1) // 2
    assert priority_key(high + 1, levels) == 1
    assert priority_key(low - 1, levels) == levels


def test_the_api_dev_server_and_compose_use_the_same_number_of_priority_levels() -> None:
    assert ApiSettings().priority_levels == PRIORITY_LEVELS == 59
    assert DYNAMIC_CONFIG["matching.priorityLevels"] == "59"
    assert ApiSettings(JOB_PRIORITY_LEVELS="5").priority_levels == 5


@pytest.mark.parametrize("levels", ["0", "61", "many"])
def test_priority_levels_outside_what_temporal_keeps_are_refused(levels: str) -> None:
    with pytest.raises(ValidationError, match="JOB_PRIORITY_LEVELS"):
        ApiSettings(JOB_PRIORITY_LEVELS=levels)


def test_parse_schemes_trims_lowercases_and_drops_empty_parts() -> None:
    assert parse_schemes(" HTTPS, http,,file ") == frozenset({"https", "http", "file"})


@pytest.mark.parametrize(
    "url", ["https://solvers.example.com/s.py", "HTTPS://solvers.example.com/s.py"]
)
def test_a_plain_https_url_has_no_shape_problem(url: str) -> None:
    assert url_shape_problem(url, HTTPS) is None


@pytest.mark.parametrize(
    "url", ["http://x.test/s", "ftp://x.test/s", "file:///bin/sh", "x.test/s", ""]
)
def test_a_scheme_outside_the_allowed_set_is_a_shape_problem(url: str) -> None:
    problem = url_shape_problem(url, HTTPS)
    assert problem is not None
    assert "scheme" in problem
    assert "https" in problem


@pytest.mark.parametrize("url", ["https://user:pw@x.test/s", "https://user@x.test/s"])
def test_credentials_in_the_url_are_a_shape_problem(url: str) -> None:
    assert url_shape_problem(url, HTTPS) == "solver_url must not carry credentials"


@pytest.mark.parametrize("url", ["https:///s.py", "https://", "https://:443/s"])
def test_a_url_without_a_host_is_a_shape_problem(url: str) -> None:
    assert url_shape_problem(url, HTTPS) == "solver_url has no host"


def test_a_file_url_needs_a_path_when_file_is_allowed() -> None:
    schemes = frozenset({"file"})
    assert url_shape_problem("file:///opt/solver", schemes) is None
    assert url_shape_problem("file://", schemes) == "solver_url file URL has no path"


def test_a_malformed_ipv6_url_is_a_shape_problem_not_an_exception() -> None:
    problem = url_shape_problem("https://[::1/s", HTTPS)
    assert problem is not None
    assert "not a URL" in problem


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "127.8.9.10",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "::1",
        "::ffff:127.0.0.1",
        "::ffff:10.0.0.1",
        "fe80::1%eth0",
        "fc00::1",
        "224.0.0.1",
    ],
)
def test_loopback_private_link_local_and_mapped_addresses_are_private(address: str) -> None:
    assert private_address([address]) is not None


def test_a_mapped_loopback_address_is_reported_as_its_ipv4_form() -> None:
    assert private_address(["::ffff:127.0.0.1"]) == "127.0.0.1"


@pytest.mark.parametrize("address", ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111"])
def test_a_public_address_is_not_private(address: str) -> None:
    assert private_address([address]) is None


def test_one_private_address_among_public_ones_is_found() -> None:
    assert private_address(["8.8.8.8", "10.0.0.7", "1.1.1.1"]) == "10.0.0.7"


def test_meta_is_kept_bounded_and_refused_naming_itself() -> None:
    spec = JobSpec(type="t", meta={"tags": ["a"], "constraints": {"cpu_heavy": True}})
    inp = JobInput(
        id="j",
        spec=spec,
        created_at=1,
        priority_key=3,
        activity_task_queue="q",
        heartbeat_timeout_ms=60_000,
    )
    assert pending_job(inp).meta == {"tags": ["a"], "constraints": {"cpu_heavy": True}}
    with pytest.raises(ValidationError, match="meta is larger than 8192 bytes"):
        JobSpec(type="t", meta={"x": "y" * 9000})


def test_the_clients_converter_is_pydantics_built_once() -> None:
    """Every client's data converter writes and reads jobforge's models exactly as
    Temporal's pydantic converter does (the histories on record stay readable), and
    the payload converter the SDK builds per activation and per activity reuses one
    set of converters (one cache of type adapters for the process)."""
    job = pending_job(
        JobInput(
            id="a" * 32,
            spec=JobSpec.model_validate({"type": "noop", "params": {"i": 1}}),
            created_at=1,
            priority_key=3,
            activity_task_queue="q",
            heartbeat_timeout_ms=60_000,
        )
    )
    ours = DATA_CONVERTER.payload_converter.to_payloads([job])
    assert ours == pydantic_data_converter.payload_converter.to_payloads([job])
    assert pydantic_data_converter.payload_converter.from_payloads(ours, [Job]) == [job]
    # The SDK builds the payload converter from its class per activation and activity:
    assert DATA_CONVERTER.payload_converter_class is SharedPydanticConverter
    first, second = SharedPydanticConverter(), SharedPydanticConverter()
    assert first.from_payloads(ours, [Job]) == [job]
    # ... each from the one JSON converter (and type-adapter cache) of the process.
    assert first.converters[b"json/plain"] is second.converters[b"json/plain"]

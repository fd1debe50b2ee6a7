"""TLS, mTLS and API-key settings reach the Temporal client, and `jobforge setup` works
over mTLS.

`temporal server start-dev` has no TLS flags, so the TLS end runs here: a TLS proxy
that requires a client certificate, in front of a plaintext dev server. The client,
the handshake and the certificate checks are the SDK's real ones; only the server's
TLS termination is ours. Certificates come from the `openssl` CLI (the `cryptography`
package is not a dependency).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pydantic import ValidationError
from temporalio.service import TLSConfig

from engine.connection import TemporalSettings, connect
from tests.conftest import ROOT
from tests.ports import free_port
from worker.cluster_setup import register_search_attributes
from worker.devserver import DevServer
from workflows import search_attributes

SERVER_NAME = "temporal.jobforge.test"
OPENSSL = shutil.which("openssl")


@dataclass(frozen=True)
class Pki:
    """A throwaway CA, a server certificate for SERVER_NAME and a client certificate."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    assert OPENSSL is not None
    subprocess.run([OPENSSL, *args], cwd=cwd, check=True, capture_output=True)


def _issue(directory: Path, name: str, subject: str, extensions: str) -> None:
    (directory / f"{name}.ext").write_text(extensions)
    _openssl(
        *("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"),
        *("-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject),
        cwd=directory,
    )
    _openssl(
        *("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key"),
        *("-CAcreateserial", "-days", "2", "-out", f"{name}.pem"),
        *("-extfile", f"{name}.ext"),
        cwd=directory,
    )


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """Certificates made with the openssl CLI."""
    if OPENSSL is None:
        pytest.skip("the openssl CLI is missing: no certificates for the TLS tests")
    directory = tmp_path_factory.mktemp("pki")
    _openssl(
        *("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"),
        *("-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=jobforge test CA"),
        *("-addext", "basicConstraints=critical,CA:TRUE"),
        *("-addext", "keyUsage=critical,keyCertSign,cRLSign"),
        cwd=directory,
    )
    _issue(
        directory,
        "server",
        f"/CN={SERVER_NAME}",
        f"subjectAltName=DNS:{SERVER_NAME}\nextendedKeyUsage=serverAuth\n",
    )
    _issue(directory, "client", "/CN=jobforge-worker", "extendedKeyUsage=clientAuth\n")
    return Pki(
        ca=directory / "ca.pem",
        server_cert=directory / "server.pem",
        server_key=directory / "server.key",
        client_cert=directory / "client.pem",
        client_key=directory / "client.key",
    )


@pytest.fixture(scope="module")
def bare_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    """A plaintext dev server without jobforge's search attributes (a fresh cluster)."""
    server = DevServer(
        tmp_path_factory.mktemp("tls-temporal"),
        port=free_port(),
        ui_port=None,
        register_attributes=False,
    )
    server.start()
    yield server
    server.stop()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, ssl.SSLError):
        pass
    finally:
        writer.close()


@pytest.fixture(scope="module")
async def mtls_address(pki: Pki, bare_server: DevServer) -> AsyncIterator[str]:
    """host:port of a TLS endpoint that requires a client certificate signed by the test
    CA and forwards the HTTP/2 stream to the dev server."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki.ca))
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_cert_chain(pki.server_cert, pki.server_key)
    context.set_alpn_protocols(["h2"])
    writers: list[asyncio.StreamWriter] = []

    async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", bare_server.port)
        except OSError:
            writer.close()
            return
        writers.append(up_writer)
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    server = await asyncio.start_server(forward, "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    yield f"127.0.0.1:{port}"
    server.close()
    for writer in writers:
        writer.close()
    with contextlib.suppress(Exception):
        await server.wait_closed()


def mtls_settings(pki: Pki, address: str, **overrides: object) -> TemporalSettings:
    """Settings for the mTLS endpoint: client cert and key, the test CA, its name."""
    values: dict[str, object] = {
        "address": address,
        "tls_cert": pki.client_cert,
        "tls_key": pki.client_key,
        "tls_ca": pki.ca,
        "tls_server_name": SERVER_NAME,
        **overrides,
    }
    return TemporalSettings.model_validate(values)


# -- settings and client options (no server) ----------------------------------------


def test_tls_settings_are_read_from_the_temporal_environment(
    pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEMPORAL_TLS_CERT", str(pki.client_cert))
    monkeypatch.setenv("TEMPORAL_TLS_KEY", str(pki.client_key))
    monkeypatch.setenv("TEMPORAL_TLS_CA", str(pki.ca))
    monkeypatch.setenv("TEMPORAL_TLS_SERVER_NAME", SERVER_NAME)
    monkeypatch.setenv("TEMPORAL_API_KEY", "key-123")

    settings = TemporalSettings()

    assert settings.tls_cert == pki.client_cert
    assert settings.tls_key == pki.client_key
    assert settings.tls_ca == pki.ca
    assert settings.tls_server_name == SERVER_NAME
    assert settings.api_key == "key-123"


def test_temporal_cli_names_for_the_tls_files_are_read_too(
    pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEMPORAL_TLS_CLIENT_CERT_PATH", str(pki.client_cert))
    monkeypatch.setenv("TEMPORAL_TLS_CLIENT_KEY_PATH", str(pki.client_key))
    monkeypatch.setenv("TEMPORAL_TLS_SERVER_CA_CERT_PATH", str(pki.ca))

    settings = TemporalSettings()

    assert (settings.tls_cert, settings.tls_key, settings.tls_ca) == (
        pki.client_cert,
        pki.client_key,
        pki.ca,
    )


def test_the_tls_config_carries_the_files_contents_and_the_server_name(pki: Pki) -> None:
    tls = mtls_settings(pki, "cluster:7233").tls_config()

    assert tls == TLSConfig(
        server_root_ca_cert=pki.ca.read_bytes(),
        domain=SERVER_NAME,
        client_cert=pki.client_cert.read_bytes(),
        client_private_key=pki.client_key.read_bytes(),
    )


def test_without_tls_settings_the_connection_stays_plaintext() -> None:
    assert TemporalSettings(address="cluster:7233").tls_config() is False


def test_an_api_key_alone_turns_on_tls_with_the_system_roots() -> None:
    settings = TemporalSettings(address="ns.acct.tmprl.cloud:7233", api_key="key-123")
    assert settings.tls_config() is True


def test_a_client_certificate_without_its_key_is_refused(pki: Pki) -> None:
    with pytest.raises(ValidationError, match="TEMPORAL_TLS_KEY"):
        TemporalSettings(tls_cert=pki.client_cert)


async def test_connect_gives_the_client_the_tls_config_and_the_api_key(pki: Pki) -> None:
    settings = mtls_settings(pki, f"127.0.0.1:{free_port()}", api_key="key-123")

    client = await connect(settings, lazy=True)

    config = client.service_client.config
    assert config.api_key == "key-123"
    assert config.tls == settings.tls_config()


async def test_a_missing_tls_file_is_named_when_connecting(tmp_path: Path) -> None:
    settings = TemporalSettings(tls_ca=tmp_path / "nowhere.pem")
    with pytest.raises(FileNotFoundError, match=r"nowhere\.pem"):
        await connect(settings, lazy=True)


# -- against a TLS endpoint that requires a client certificate -----------------------


async def test_setup_registers_the_search_attributes_over_mtls(pki: Pki, mtls_address: str) -> None:
    settings = mtls_settings(pki, mtls_address)

    added = await register_search_attributes(settings)
    again = await register_search_attributes(settings)

    assert set(added) == set(search_attributes.REGISTRATION)
    assert again == []


async def test_the_jobforge_setup_command_reads_the_tls_settings_from_its_environment(
    pki: Pki, mtls_address: str
) -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "TEMPORAL_ADDRESS": mtls_address,
        "TEMPORAL_TLS_CERT": str(pki.client_cert),
        "TEMPORAL_TLS_KEY": str(pki.client_key),
        "TEMPORAL_TLS_CA": str(pki.ca),
        "TEMPORAL_TLS_SERVER_NAME": SERVER_NAME,
    }
    # Not subprocess.run: the TLS endpoint runs on this test's event loop.
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "worker.cli", "setup"),
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=60)

    assert process.returncode == 0, stderr.decode()
    assert b"search attributes ready" in stdout


async def test_a_client_without_a_certificate_is_refused(pki: Pki, mtls_address: str) -> None:
    settings = TemporalSettings(address=mtls_address, tls_ca=pki.ca, tls_server_name=SERVER_NAME)
    # TLS 1.3 checks the client's certificate after the handshake: the server hangs up.
    # Refused at the handshake: reported as a transport error, or on a busy machine as
    # the connection closed under the call.
    with pytest.raises(RuntimeError, match=r"transport error|connection closed"):
        await connect(settings, retry_ms=500)


async def test_a_server_certificate_for_another_name_is_refused(
    pki: Pki, mtls_address: str
) -> None:
    settings = mtls_settings(pki, mtls_address, tls_server_name="other.jobforge.test")
    with pytest.raises(RuntimeError, match="NotValidForName"):
        await connect(settings, retry_ms=500)

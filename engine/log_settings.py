"""Where job logs live (LOG_STORE_URL, LOG_DIR) and how much of an attempt's output is
kept; `LogSettings.open()` builds the store they name: files (engine/log_store.py) or
an S3 bucket (engine/log_s3.py)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from engine.log_s3 import S3Location, S3LogStore
from engine.log_store import FileLogStore, LogStore

S3_QUERY_KEYS = {"endpoint", "region"}


class LogSettings(BaseSettings):
    """Where logs live and how much of an attempt's output is kept. The S3 store's
    credentials are the standard AWS variables (the instance's role when unset)."""

    model_config = SettingsConfigDict(extra="ignore")

    log_dir: Path = Field(default=Path("~/.jobforge/logs"), validation_alias="LOG_DIR")
    log_max_bytes: int = Field(
        default=1024 * 1024, ge=1024, le=1024**3, validation_alias="LOG_MAX_BYTES"
    )
    log_store_url: str = Field(
        default="",
        validation_alias="LOG_STORE_URL",
        description="Empty: files in LOG_DIR. `s3://bucket[/prefix][?endpoint=URL&region=R]`",
    )
    aws_access_key_id: str | None = Field(default=None, validation_alias="AWS_ACCESS_KEY_ID")
    aws_secret_access_key: SecretStr | None = Field(
        default=None, validation_alias="AWS_SECRET_ACCESS_KEY"
    )
    aws_session_token: SecretStr | None = Field(default=None, validation_alias="AWS_SESSION_TOKEN")
    aws_region: str | None = Field(
        default=None, validation_alias=AliasChoices("AWS_REGION", "AWS_DEFAULT_REGION")
    )
    aws_endpoint_url: str | None = Field(
        default=None, validation_alias=AliasChoices("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
    )

    @field_validator("log_store_url")
    @classmethod
    def _s3_or_nothing(cls, url: str) -> str:
        if not url:
            return url
        parts = urlsplit(url)
        query = parse_qs(parts.query)
        if parts.scheme != "s3" or not parts.netloc:
            raise ValueError("must be empty (files in LOG_DIR) or s3://bucket[/prefix]")
        if unknown := set(query) - S3_QUERY_KEYS:
            raise ValueError(f"unknown parameter(s) {sorted(unknown)}; known: endpoint, region")
        endpoint = query.get("endpoint", [""])[-1]
        if endpoint and urlsplit(endpoint).scheme not in ("http", "https"):
            raise ValueError("its endpoint must be an http:// or https:// URL")
        return url

    @property
    def root(self) -> Path:
        return self.log_dir.expanduser()

    def s3_location(self) -> S3Location | None:
        """The bucket, prefix and connection LOG_STORE_URL names; None for files."""
        if not self.log_store_url:
            return None
        parts = urlsplit(self.log_store_url)
        query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
        return S3Location(
            bucket=parts.netloc,
            prefix=parts.path.strip("/"),
            endpoint=query.get("endpoint") or self.aws_endpoint_url,
            region=query.get("region") or self.aws_region,
            access_key_id=self.aws_access_key_id,
            secret_access_key=_secret(self.aws_secret_access_key),
            session_token=_secret(self.aws_session_token),
        )

    def open(self) -> LogStore:
        """The store LOG_STORE_URL names (built once per process: it caches)."""
        location = self.s3_location()
        if location is None:
            return FileLogStore(self.root, self.log_max_bytes)
        return S3LogStore(location, self.log_max_bytes)


def _secret(value: SecretStr | None) -> str | None:
    return value.get_secret_value() if value is not None else None

"""Units the designs speak in and jobforge's epoch milliseconds, both ways."""

from __future__ import annotations

from datetime import UTC, datetime


def iso(ms: int | None) -> str | None:
    """Epoch ms as ISO 8601 in UTC, to the millisecond."""
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def epoch_ms(value: datetime | None) -> int | None:
    """A time as epoch ms; one without a zone is read as UTC."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return round(value.timestamp() * 1000)

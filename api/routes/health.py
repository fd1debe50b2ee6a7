"""Liveness."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel

router = APIRouter(tags=["health"])


class Health(BaseModel):
    """Liveness answer."""

    status: str


@router.get("/healthz", response_model=Health)
async def healthz() -> Health:
    """The API process is up (it does not call Temporal)."""
    return Health(status="ok")

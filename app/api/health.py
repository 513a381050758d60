"""HTTP adapter: health endpoints (thin: parse -> call pure function -> build response)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter()

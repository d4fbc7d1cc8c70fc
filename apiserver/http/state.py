"""What the handlers serve from, built once by ``create_app`` and handed to
each request as the app's state (never a module global)."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request

from apiserver.storage.ports import AnalyticsQueries
from apiserver.storage.service import ReportService
from pipeline.settings import Settings


@dataclass(frozen=True)
class Frontend:
    """The report service, the settings, and the analytics store if served."""

    service: ReportService
    settings: Settings
    store: AnalyticsQueries | None = None


def frontend(request: Request) -> Frontend:
    """The ``Frontend`` of the app serving ``request``."""
    state: Frontend = request.app.state.frontend
    return state

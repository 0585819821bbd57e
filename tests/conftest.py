"""Shared test set-up."""

import pytest
import structlog


@pytest.fixture(autouse=True)
def _fresh_logging():
    """Each test starts from structlog's defaults: a CLI call in an earlier test configures a
    warning-level filter (and its stream) that would otherwise hide later tests' events."""
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()

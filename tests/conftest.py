"""Shared fixtures for the project's own tests.

Tiers: ``unit/`` pure and in-process (no worker processes), ``workers/`` real
device-worker processes with bounded waits, ``e2e/`` the CLI and pytest front
ends in subprocesses on generated case files.  Helpers live in ``helpers.py``.
"""
from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def golden_cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("golden-cache")

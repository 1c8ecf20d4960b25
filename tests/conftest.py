"""Shared fixtures for the project's own tests.

Tiers: ``unit/`` pure and in-process (no worker processes), ``workers/`` real
device-worker processes with bounded waits, ``e2e/`` the CLI and pytest front
ends in subprocesses on generated case files.  Helpers live in ``helpers.py``.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest


def pytest_configure(config: pytest.Config) -> None:
    # triton reads TRITON_INTERPRET once, when it is first imported, and importing transformers
    # (the outside kernels, the goldens' cross-check) can import it before the Triton tests
    # run: set it for the whole session so those tests always find the CPU interpreter.
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture
def golden_cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("golden-cache")

"""The engine options of a run, resolved in one place for both front ends (CLI and pytest plugin).

A front end turns its own flags into ``Settings`` (values as given, ``None`` where
unset); ``run_options`` applies the environment and the defaults, in that order
of precedence: flag, then environment (``$HARNESS_GOLDEN_CACHE``, ``$HARNESS_STORE``),
then the built-in default.
"""
from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.classify import default_rules
from harness.devices import Device
from harness.run.engine import RunOptions
from harness.run.pool import WorkerOptions
from harness.store import DEFAULT_STORE


def default_cache_dir() -> Path:
    """``$HARNESS_GOLDEN_CACHE``, else ``$XDG_CACHE_HOME/fused-kernel-harness/goldens``, else ``~/.cache/...``."""
    explicit = os.environ.get("HARNESS_GOLDEN_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "fused-kernel-harness" / "goldens"


@dataclass(frozen=True)
class Settings:
    """What a front end's flags say about how cases run."""

    devices: tuple[Device, ...]
    kernel_paths: tuple[str, ...] = ()      # relative ones are taken from the current directory
    golden_cache: str | None = None         # None: $HARNESS_GOLDEN_CACHE or ~/.cache/...; "": keep no goldens
    golden_dtype: str = "fp32"
    log_dir: str | None = None              # None: reports/logs/<log_prefix><time>
    log_prefix: str = ""
    log_subdir: str = ""                    # one per pytest-xdist worker under the shared log dir
    rules: tuple[str, ...] = ()             # extra classifier rule files
    tier: str = "auto"
    exitfirst: bool = False


def golden_cache(flag: str | None, disabled: bool) -> str | None:
    """The ``golden_cache`` setting of ``--golden-cache`` / ``--no-golden-cache``."""
    return "" if disabled else flag


def kernel_paths(flags) -> tuple[str, ...]:
    """``--kernel-path`` values as absolute paths (stored with a run, so ``--resume`` finds them)."""
    return tuple(str(Path(p).resolve()) for p in flags)


def store_path(flag: str | None, env: Mapping[str, str] = os.environ) -> str:
    """``--store``, else ``$HARNESS_STORE``, else the default."""
    return str(flag or env.get("HARNESS_STORE") or DEFAULT_STORE)


def run_options(settings: Settings) -> RunOptions:
    """The engine options ``settings`` say (a bad rules file: ``RulesError``, before any case)."""
    cache = settings.golden_cache
    if cache is None:
        cache = str(default_cache_dir())
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    log_dir = Path(settings.log_dir or Path("reports") / "logs" / f"{settings.log_prefix}{stamp}").resolve()
    if settings.log_subdir:
        log_dir = log_dir / settings.log_subdir
    worker = WorkerOptions(log_dir=log_dir, golden_cache=cache, golden_dtype=settings.golden_dtype,
                           kernel_paths=kernel_paths(settings.kernel_paths),
                           rules=default_rules(extra=[Path(p) for p in settings.rules]))
    return RunOptions(devices=list(settings.devices), worker=worker, run_device_tier_on_cpu=settings.tier == "all",
                      exitfirst=settings.exitfirst)


@dataclass(frozen=True)
class ResumeOptions:
    """The options a run records (its ``extra["options"]``) so that ``--resume`` runs the missing
    cases the same way; both front ends write them."""

    kernel_paths: tuple[str, ...] = ()      # absolute
    golden_dtype: str = "fp32"
    tier: str = "auto"

    def to_dict(self) -> dict[str, Any]:
        return {"kernel_paths": list(self.kernel_paths), "golden_dtype": self.golden_dtype, "tier": self.tier}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], default: "ResumeOptions") -> "ResumeOptions":
        """What ``data`` holds, ``default`` (today's flags) for what it lacks (an older run)."""
        return cls(kernel_paths=tuple(data.get("kernel_paths") or default.kernel_paths),
                   golden_dtype=data.get("golden_dtype", default.golden_dtype), tier=data.get("tier", default.tier))

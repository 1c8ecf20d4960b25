"""Where a result came from: host, harness, torch/device stack, kernel checkout, environment.

Front-end side: ``run_provenance()`` (no torch import).  Worker side:
``cann_version()`` and ``kernel_origin()``, reported with the worker's
``ready`` message and each result, so a report says what really ran.
"""
from __future__ import annotations

import os
import platform
import re
import socket
import subprocess
import sys
from pathlib import Path

from harness import __version__

# Variables that change what a kernel does or where it comes from.
_ENV_PATTERNS = (r"^PTO2_", r"^ASCEND_", r"^CUDA_VISIBLE_DEVICES$", r"^ASCEND_RT_VISIBLE_DEVICES$",
                 r"^PYTHONPATH$", r"^PYPTO_ROOT$", r"^TRITON_", r"^HARNESS_")
_CANN_VERSION_FILES = ("version.cfg", "ascend_toolkit_install.info", "compiler/version.info",
                       "runtime/version.info")


def relevant_env(env: dict[str, str] | None = None) -> dict[str, str]:
    env = os.environ if env is None else env
    return {k: v for k, v in sorted(env.items()) if any(re.search(p, k) for p in _ENV_PATTERNS)}


def git_revision(path: str | Path) -> dict[str, str] | None:
    """sha, subject and dirty flag of the git checkout holding ``path``; None outside git."""
    directory = Path(path)
    directory = directory if directory.is_dir() else directory.parent
    try:
        sha = subprocess.run(["git", "-C", str(directory), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5)
        if sha.returncode != 0:
            return None
        subject = subprocess.run(["git", "-C", str(directory), "log", "-1", "--format=%s"],
                                 capture_output=True, text=True, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(directory), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return {"sha": sha.stdout.strip(), "subject": subject, "dirty": bool(dirty)}


def run_provenance(kernel_paths: tuple[str, ...] = ()) -> dict:
    harness_root = Path(__file__).resolve().parent.parent
    return {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "harness_version": __version__,
        "harness_git": git_revision(harness_root),
        "kernel_paths": {p: git_revision(p) for p in kernel_paths},
        "env": relevant_env(),
    }


def cann_version(env: dict[str, str] | None = None) -> str | None:
    """The CANN toolkit version from ``$ASCEND_HOME_PATH`` (or the default install), if any."""
    env = os.environ if env is None else env
    roots = [env.get("ASCEND_HOME_PATH"), env.get("ASCEND_TOOLKIT_HOME"),
             "/usr/local/Ascend/ascend-toolkit/latest"]
    for root in filter(None, roots):
        for name in _CANN_VERSION_FILES:
            path = Path(root) / name
            try:
                text = path.read_text(errors="replace")
            except OSError:
                continue
            m = re.search(r"(?:^|\n)\s*(?:version|Version|toolkit_installed_version)\s*[=:]\s*\[?([\w.\-]+)", text)
            if m:
                return m.group(1)
    return None


def kernel_origin(module_file: str | None) -> dict:
    if not module_file:
        return {}
    return {"file": module_file, "git": git_revision(module_file)}

"""The engine options of a run, resolved in one place for both front ends (CLI and pytest plugin).

A front end turns its own flags into ``Settings`` (values as given, ``None`` where
unset); ``run_options`` applies the environment and the defaults, in that order
of precedence: flag, then environment (``$HARNESS_GOLDEN_CACHE``, ``$HARNESS_STORE``),
then the built-in default.  ``--kernel`` is applied to the loaded cases here too:
``kernel_states`` checks the kernel in a short-lived interpreter, ``with_kernel``
replaces every case's kernel.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.case import Case
from harness.casefiles.located import did_you_mean
from harness.classify import default_rules
from harness.devices import Device, DeviceError, parse_device
from harness.errors import UsageError
from harness.files import user_cache_dir
from harness.formats import one_line
from harness.logs import LOG_CAP_BYTES
from harness.path_kinds import refuse_special_path, require_directory
from harness.ops.registry import BUILTINS, is_kernel_name
from harness.run.engine import RunOptions
from harness.run.pool import worker_env
from harness.run.spawn import WorkerOptions
from harness.store import DEFAULT_STORE


def default_cache_dir() -> Path:
    """``$HARNESS_GOLDEN_CACHE``, else ``$XDG_CACHE_HOME/fused-kernel-harness/goldens``, else ``~/.cache/...``."""
    explicit = os.environ.get("HARNESS_GOLDEN_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    return user_cache_dir() / "goldens"


def repo_state_dir(repo: Path) -> Path:
    """Where a command whose current directory is the repository under test (``bisect-run``)
    keeps its default store and logs: ``<user cache>/repos/<name>-<hash of its path>``, never
    inside the checkout (untracked files there would change what git bisects)."""
    top = repo.resolve()
    digest = hashlib.sha256(str(top).encode()).hexdigest()[:12]
    return user_cache_dir() / "repos" / f"{top.name}-{digest}"


# Iterations per case, for both front ends: a plan is built per iteration before the first
# runs, so past this it would fill memory instead of running.
MAX_REPEAT = 100_000

_HARNESS_CHECKOUT = Path(__file__).resolve().parents[2]


def foreign_checkout_state(cwd: Path | None = None) -> Path | None:
    """Where the default store and logs go instead of ``./reports`` when the current directory is
    inside a git checkout that is not a harness project (a kernel library being worked on):
    ``repo_state_dir`` of that checkout, as for ``bisect-run``.  A checkout is a harness project
    (None: ``./reports`` as always) when it is the harness's own, or its top holds ``cases/``
    or ``reports/``, or the current directory holds ``reports/`` (the user chose it)."""
    cwd = (cwd or Path.cwd()).resolve()
    top = next((d for d in (cwd, *cwd.parents) if (d / ".git").exists()), None)
    if top is None or top == _HARNESS_CHECKOUT or (cwd / "reports").is_dir():
        return None
    if (top / "cases").is_dir() or (top / "reports").is_dir():
        return None
    return repo_state_dir(top)


def default_store() -> Path:
    """``reports/results.sqlite``, or in a foreign checkout its state directory's (``foreign_checkout_state``)."""
    state = foreign_checkout_state()
    if state is None:
        return DEFAULT_STORE
    state.mkdir(parents=True, exist_ok=True)    # our own cache directory, made when a run first needs it
    return state / "results.sqlite"


def default_log_root() -> Path:
    """``reports/logs``, or in a foreign checkout its state directory's (``foreign_checkout_state``)."""
    state = foreign_checkout_state()
    return Path("reports") / "logs" if state is None else state / "logs"


@dataclass(frozen=True)
class Settings:
    """What a front end's flags say about how cases run."""

    devices: tuple[Device, ...]
    kernel_paths: tuple[str, ...] = ()      # relative ones are taken from the current directory
    golden_cache: str | None = None         # None: $HARNESS_GOLDEN_CACHE or ~/.cache/...; "": keep no goldens
    golden_dtype: str = "fp32"
    golden_device: str = "cpu"              # checked by golden_device(): where goldens are computed
    log_dir: str | None = None              # None: <log_root>/<log_prefix><log_name>
    log_root: Path | None = None            # None: default_log_root()
    log_prefix: str = ""
    log_name: str | None = None             # None: a name of this run's own (see run_options)
    log_subdir: str = ""                    # one per pytest-xdist worker under the shared log dir
    rules: tuple[str, ...] = ()             # extra classifier rule files
    max_log_bytes: int = LOG_CAP_BYTES      # each case log cut to its head and tail past this
    tier: str = "auto"
    exitfirst: bool = False
    device_logs: bool = False               # capture device runtime logs on every device (always on npu)
    blocking_rerun: bool = True             # re-run a device fault launch-blocking, once
    log_dir_flag: str = "--log-dir"         # the flag that names log_dir, for a refusal (pytest: --harness-log-dir)
    intermediates: str = "on-failure"       # off | on-failure | always (docs/intermediates.md)
    isolation: str = "warm"                 # warm: one worker for many cases; case: a fresh worker per case


def golden_cache(flag: str | None, disabled: bool) -> str | None:
    """The ``golden_cache`` setting of ``--golden-cache`` / ``--no-golden-cache``."""
    return "" if disabled else flag


def kernel_paths(flags) -> tuple[str, ...]:
    """``--kernel-path`` values as absolute paths (stored with a run, so ``--resume`` finds them);
    one starting with ``{worktree}`` is kept as written: each ref's worktree replaces it
    (``spawn.expand_kernel_paths``).  A FIFO, socket, device or symlink loop: ``UsageError`` (a FIFO on the
    workers' PYTHONPATH would hang their first import)."""
    for p in flags:
        if not p.startswith("{worktree}"):
            refuse_special_path(p, "--kernel-path")
    return tuple(p if p.startswith("{worktree}") else str(Path(p).resolve()) for p in flags)


def store_path(flag: str | None, env: Mapping[str, str] = os.environ, default: Path | None = None) -> str:
    """``--store``, else ``$HARNESS_STORE``, else ``default`` (None: ``default_store()``)."""
    return str(flag or env.get("HARNESS_STORE") or default or default_store())


def new_log_name() -> str:
    """A log directory name no other run gets: two runs started in the same second (or the same
    directory) once shared ``reports/logs/<second>`` and overwrote each other's logs.  The pid
    separates runs on one host, the random part runs on hosts that share the directory."""
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{os.getpid()}-{secrets.token_hex(4)}"   # 2 bytes: 50 names in one second collided 2% of the time


def run_options(settings: Settings) -> RunOptions:
    """The engine options ``settings`` say (a bad rules file: ``RulesError``, before any case)."""
    cache = settings.golden_cache
    if cache is None:
        cache = str(default_cache_dir())
    if cache:       # absolute now: a kernel that chdirs must not move the goldens of later cases
        cache = str(Path(cache).expanduser().resolve())
    log_root = settings.log_root or default_log_root()
    log_dir = Path(settings.log_dir or log_root / f"{settings.log_prefix}{settings.log_name or new_log_name()}")
    log_dir = log_dir.resolve()
    if settings.log_subdir:
        log_dir = log_dir / settings.log_subdir
    # A FIFO, a device or a regular file where a directory belongs: one line now, not an
    # internal error (or every case HARNESS_ERROR) once the first case makes its log or golden.
    require_directory(log_dir, settings.log_dir_flag if settings.log_dir else "log directory")
    if cache:
        require_directory(cache, "--golden-cache" if settings.golden_cache else "golden cache directory")
    for rules in settings.rules:        # the pytest plugin's --harness-rules too: a FIFO would hang the read
        refuse_special_path(rules, "--rules")
    worker = WorkerOptions(log_dir=log_dir, golden_cache=cache, golden_dtype=settings.golden_dtype,
                           golden_device=settings.golden_device,
                           kernel_paths=kernel_paths(settings.kernel_paths),
                           rules=default_rules(extra=[Path(p) for p in settings.rules]),
                           max_log_bytes=settings.max_log_bytes, device_logs=settings.device_logs,
                           blocking_rerun=settings.blocking_rerun, intermediates=settings.intermediates,
                           isolation=settings.isolation)
    return RunOptions(devices=list(settings.devices), worker=worker, run_device_tier_on_cpu=settings.tier == "all",
                      exitfirst=settings.exitfirst)


@dataclass(frozen=True)
class ResumeOptions:
    """The options a run records (its ``extra["options"]``) so that ``--resume`` runs the missing
    cases the same way; both front ends write them."""

    kernel_paths: tuple[str, ...] = ()      # absolute
    golden_dtype: str = "fp32"
    tier: str = "auto"
    golden_device: str = "cpu"              # --golden-device as given (checked again by golden_device())

    def to_dict(self) -> dict[str, Any]:
        return {"kernel_paths": list(self.kernel_paths), "golden_dtype": self.golden_dtype, "tier": self.tier,
                "golden_device": self.golden_device}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], default: "ResumeOptions") -> "ResumeOptions":
        """What ``data`` holds, ``default`` (today's flags) for what it lacks (an older run)."""
        return cls(kernel_paths=tuple(data.get("kernel_paths") or default.kernel_paths),
                   golden_dtype=data.get("golden_dtype", default.golden_dtype), tier=data.get("tier", default.tier),
                   golden_device=data.get("golden_device", default.golden_device))


# -- absent devices ------------------------------------------------------------

DEVICE_PROBE_TIMEOUT_S = 120.0   # importing torch (and torch-npu, which initialises CANN)


def absent_devices(devices: Sequence[Device], base_env: Mapping[str, str] | None = None) -> dict[Device, str]:
    """The accelerators in ``devices`` that a worker would not find, with the reason its backend
    gives, asked in a fresh interpreter with the workers' environment (the front end imports no
    device runtime).  CPU is always present and costs no probe."""
    wanted = list(dict.fromkeys(d for d in devices if d.kind != "cpu"))
    if not wanted:
        return {}
    options = WorkerOptions(log_dir=Path("."), **({"base_env": dict(base_env)} if base_env is not None else {}))
    code = "import sys; from harness.devices import probe_main; probe_main(sys.argv[1:])"
    try:
        done = subprocess.run([sys.executable, "-c", code, *map(str, wanted)], env=worker_env(options, {}),
                              capture_output=True, text=True, timeout=DEVICE_PROBE_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
        found = json.loads(done.stdout.strip().splitlines()[-1])
    except subprocess.TimeoutExpired:
        return {d: f"the device probe took over {DEVICE_PROBE_TIMEOUT_S:g} s" for d in wanted}
    except (IndexError, json.JSONDecodeError):
        tail = " ".join(done.stderr.split()[-20:])
        return {d: f"the device probe failed (exit {done.returncode}): {tail}" for d in wanted}
    return {d: found[str(d)] for d in wanted if found.get(str(d))}


def require_present(devices: Sequence[Device], allow_absent: bool, flag: str = "--allow-absent-devices") -> None:
    """An absent accelerator is exit 2 before any case, not a run of SKIPPED cases that exits 0
    (a false green in CI); ``allow_absent`` (the front end's ``flag``) keeps the skips."""
    if allow_absent:
        return
    absent = absent_devices(devices)
    if absent:
        device, why = next(iter(absent.items()))
        more = f" (and {len(absent) - 1} more)" if len(absent) > 1 else ""
        raise DeviceError(f"{device} not present: {one_line(why)}{more}; {flag} runs anyway, "
                          f"every case on it SKIPPED")


def golden_device(text: str, flag: str = "--golden-device") -> str:
    """``--golden-device`` as the golden process takes it (``cuda`` is ``cuda:0``): a malformed
    name, or an accelerator that is not present (probed as ``--device`` is), is a ``DeviceError``
    naming ``flag`` (exit 2, before any case).  A golden device has no absent-devices escape:
    without it there is nothing to compare against."""
    device = parse_device(text, flag)
    absent = absent_devices([device])
    if absent:
        raise DeviceError(f"{flag} {device} not present: {one_line(absent[device])}")
    return str(device)


# -- --kernel -------------------------------------------------------------------

KERNEL_CHECK_TIMEOUT_S = 300.0   # an import may compile extensions (Triton, CANN ops)


class KernelError(UsageError):
    """A ``--kernel`` that cannot run any selected case: exit 2 before any case runs."""


@dataclass(frozen=True)
class KernelState:
    """What ``harness.worker.kernel_check`` found for one op of a kernel."""

    state: str          # ok | absent | import | signature
    detail: str = ""


@dataclass(frozen=True)
class KernelChoice:
    """The cases ``--kernel`` runs, and one line per op it leaves out."""

    kernel: str
    cases: tuple[Case, ...]
    notes: tuple[str, ...]


def check_kernel_name(kernel: str) -> None:
    if not is_kernel_name(kernel):
        raise KernelError(f"--kernel {kernel!r}: not a builtin{did_you_mean(kernel, BUILTINS)} "
                          f"(builtins: {', '.join(BUILTINS)}) nor package.module[:callable]")


def kernel_states(kernel: str, ops: Sequence[str], paths: Sequence[str] = (),
                  base_env: Mapping[str, str] | None = None,
                  arg_names: Mapping[str, Sequence[str]] | None = None) -> dict[str, KernelState]:
    """Import ``kernel`` for each op and bind the op's arguments, in a fresh interpreter with the
    workers' PYTHONPATH (``paths`` = ``--kernel-path``): the code under test never loads here."""
    check_kernel_name(kernel)
    options = WorkerOptions(log_dir=Path("."), kernel_paths=kernel_paths(paths),
                            **({"base_env": dict(base_env)} if base_env is not None else {}))
    named = arg_names or {}        # spec ops: their argument names (harness/worker/kernel_check.py)
    command = [sys.executable, "-m", "harness.worker.kernel_check", kernel,
               *(f"{op}={','.join(named[op])}" if op in named else op for op in ops)]
    try:
        done = subprocess.run(command, env=worker_env(options, {}), capture_output=True, text=True,
                              timeout=KERNEL_CHECK_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise KernelError(f"--kernel {kernel}: importing it took over {KERNEL_CHECK_TIMEOUT_S:g} s") from None
    lines = done.stdout.strip().splitlines()
    try:
        found = json.loads(lines[-1]) if done.returncode == 0 and lines else None
    except json.JSONDecodeError:
        found = None
    if not isinstance(found, dict):     # the import killed the interpreter (a signal, os._exit)
        tail = " ".join(done.stderr.split()[-30:])
        raise KernelError(f"--kernel {kernel}: importing it ended the interpreter (exit {done.returncode}): {tail}")
    return {op: KernelState(**found[op]) for op in ops}


def registry_states(kernel: str, ops: Sequence[str]) -> dict[str, KernelState]:
    """What can be known without importing: the ops a builtin lacks (compare and bisect, where
    the kernel's code is each ref's and a failed import is that ref's ``BUILD_ERROR``)."""
    check_kernel_name(kernel)
    return {op: KernelState("absent" if kernel in BUILTINS and op not in BUILTINS[kernel] else "ok")
            for op in ops}


def with_kernel(cases: Sequence[Case], kernel: str, states: Mapping[str, KernelState]) -> KernelChoice:
    """Every case run by ``kernel`` instead of its own, ids unchanged; cases of ops the kernel
    lacks left out (one note per op).  A kernel that does not import, or that no selected case
    can run (no op, or no op whose arguments bind): ``KernelError``.  Ops whose arguments do
    not bind while others do run, and come out ``CONTRACT``."""
    ops = list(dict.fromkeys(c.op for c in cases))
    for op in ops:
        if states[op].state == "import":
            hint = did_you_mean(kernel, BUILTINS) if ":" not in kernel and "." not in kernel else ""
            raise KernelError(f"--kernel {kernel}: {one_line(states[op].detail)}{hint}")
    present = [op for op in ops if states[op].state != "absent"]
    if not present:
        raise KernelError(f"--kernel {kernel} has none of the ops of the selected cases: {', '.join(ops)}")
    if all(states[op].state == "signature" for op in present):
        raise KernelError(f"--kernel {kernel}: {one_line(states[present[0]].detail)}")
    notes = []
    for op in ops:
        count = sum(c.op == op for c in cases)
        if states[op].state == "absent":
            notes.append(f"kernel {kernel} has no {op}: {count} case{'s' * (count != 1)} not run")
        elif states[op].state == "signature":
            notes.append(f"kernel {kernel}: {one_line(states[op].detail)}: {count} case{'s' * (count != 1)} "
                         f"will be CONTRACT")
    chosen = tuple(replace(c, kernel=kernel, params={**c.params, "kernel": kernel} if "kernel" in c.params
                           else c.params) for c in cases if c.op in present)
    return KernelChoice(kernel, chosen, tuple(notes))

"""pytest front end: case files become test items, run by the same engine as the CLI.

Collected: ``*.yaml``/``*.yml`` inside a directory named ``cases`` whose top level holds a key
only case files have (``op``, ``command``, ...), and any case file named on the command line.
``-k``, ``-x`` and ``--junitxml`` are pytest's own; ``-n N`` (pytest-xdist) gives each xdist
worker the device at its index in ``--devices`` (so ``-n 8 --devices npu:0-7`` is one process
per NPU).  Kernels still run in a device worker process, never in pytest's.

Installed, this plugin is loaded into every pytest session of the environment (the ``pytest11``
entry point), so it stays inert unless asked: a session that collects no case file and passes
no harness option opens no store, runs no git, creates nothing and prints nothing.  Its options
are registered as ``--harness-*``; the short spellings (``--device``, ``--store``, ``--repeat``,
...) are added as aliases only where no other plugin or conftest has taken the name.
``-p no:harness`` turns it off altogether.
"""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

_ENGINE_KEY = pytest.StashKey[object]()
_STORE_KEY = pytest.StashKey[object]()        # the open Store, in the process that runs cases
_RUN_KEY = pytest.StashKey[dict]()            # the run: id, --store as given, invocation dir (controller's choice)
_OPENED_KEY = pytest.StashKey[set]()          # store paths a run was recorded in (by this process or its workers)
_RESULTS_KEY = pytest.StashKey[list]()        # results of this process's items (the flake summary without a store)
_LATENCY_KEY = pytest.StashKey[list]()        # this process's timed cases, one line each (--harness-latency)

# (canonical --harness-* name, the short alias users type, argparse keywords); getoption() takes
# the canonical name.  The alias is registered after the initial conftests, and only when free:
# a project whose conftest defines its own --device (many do) must not crash because we are installed.
_OPTIONS: list[tuple[str, str | None, dict]] = [
    ("--harness-device", "--device", dict(default=None, help="device for case files: cpu, cuda:N, npu:N (default cpu)")),
    ("--harness-devices", "--devices", dict(
        default=None, help="devices for xdist workers (worker gwN gets the N-th): npu:0-7, cuda:0,cuda:1")),
    ("--harness-allow-absent-devices", None, dict(
        action="store_true", help="run even when an accelerator asked for is not present (its cases SKIPPED); "
                                  "without it that is a usage error before any case")),
    ("--harness-kernel", None, dict(
        default=None, metavar="NAME|pkg.mod[:fn]",
        help="run every case with this kernel instead of its own (as harness run --kernel): a builtin, "
             "package.module:callable or package.module; cases of ops it lacks are deselected")),
    ("--harness-kernel-path", "--kernel-path", dict(
        action="append", default=[], metavar="DIR", help="prepend DIR to the device workers' PYTHONPATH")),
    ("--harness-golden-cache", "--golden-cache", dict(default=None, metavar="DIR", help="golden cache directory")),
    ("--harness-no-golden-cache", "--no-golden-cache", dict(action="store_true", help="compute every golden")),
    ("--harness-golden-dtype", "--golden-dtype", dict(choices=("fp32", "fp64"), default="fp32")),
    ("--harness-golden-device", "--golden-device", dict(
        default="cpu", metavar="DEV",
        help="compute goldens on DEV (cuda:0, npu:0) with TF32/HF32 off, as harness run --golden-device")),
    ("--harness-intermediates", None, dict(
        choices=("off", "on-failure", "always"), default="on-failure",
        help="as harness run --intermediates (docs/intermediates.md)")),
    ("--harness-isolation", None, dict(
        choices=("warm", "case"), default="warm",
        help="as harness run --isolation: case runs every case in a fresh worker")),
    ("--harness-tier", None, dict(choices=("auto", "all"), default="auto", help="all: run device-tier cases on cpu too")),
    ("--harness-case-k", "--case-k", dict(
        default=None, metavar="EXPR",
        help="select cases with the harness's -k grammar (substrings may hold '=', '(' and ','; "
             "and/or/not), e.g. --case-k 'slot_mode=padded(0.25) and batch=16'")),
    ("--harness-rules", None, dict(
        action="append", default=[], metavar="FILE",
        help="extra classifier rules (YAML); harness-rules.yaml in the cwd is read too")),
    ("--harness-log-dir", None, dict(default=None, help="per-case logs (default reports/logs/pytest-<run id>)")),
    ("--harness-device-logs", None, dict(
        action="store_true", help="capture the device runtime's log files on every device (always on for npu)")),
    ("--harness-no-blocking-rerun", None, dict(
        action="store_true",
        help="do not re-run a device fault once with ASCEND_LAUNCH_BLOCKING=1 / CUDA_LAUNCH_BLOCKING=1")),
    ("--harness-store", "--store", dict(
        default=None, metavar="PATH", help="results database (default $HARNESS_STORE or reports/results.sqlite)")),
    ("--harness-no-store", "--no-store", dict(action="store_true", help="do not record case results")),
    ("--harness-debug", None, dict(
        action="store_true", help="trace worker spawns, the worker protocol, replacements and kills on stderr "
                                  "(also HARNESS_DEBUG=1)")),
    ("--harness-latency", None, dict(
        action="store_true",
        help="time every case whose checks pass, as harness run --latency (docs/latency.md): the "
             "median and its interval go into the JUnit properties and the terminal summary")),
    ("--harness-repeat", "--repeat", dict(
        type=int, default=1, metavar="N",
        help="run every case N times (a flake hunt): identical inputs, outputs compared bit for bit "
             "with the first iteration; a per-case failure rate is printed at the end")),
]
_GROUP = ("harness", "fused-kernel harness")


def _dest(name: str) -> str:
    return name.lstrip("-").replace("-", "_")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup(*_GROUP)
    for name, _alias, kwargs in _OPTIONS:
        group.addoption(name, dest=_dest(name), **kwargs)


@pytest.hookimpl(wrapper=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args):
    """After the initial conftests have added their options: the short aliases still free."""
    result = yield
    taken = _option_strings(parser)
    group = parser.getgroup(*_GROUP)
    for name, alias, kwargs in _OPTIONS:
        if alias is not None and alias not in taken:
            # the same destination as the canonical name; no default of its own (it would reset the value)
            group.addoption(alias, dest=_dest(name), help=f"same as {name}",
                            **{k: v for k, v in kwargs.items() if k not in ("default", "help")})
    return result


def _option_strings(parser: pytest.Parser) -> set[str]:
    """Every option string registered so far, by any plugin or conftest (pytest keeps them per group)."""
    groups = [getattr(parser, "_anonymous", None), *getattr(parser, "_groups", [])]
    return {n for g in groups if g is not None for opt in g.options for n in opt.names()}


# A YAML file under a `cases/` folder is ours only if its top level holds a key only case files
# have (`op`, `spec`, `command`, ...); another project's fixtures (tests/cases/*.yaml are common) are left to that project.
_CASE_KEY = re.compile(rb"^(op|spec|command|cwd|pass)[ \t]*:", re.MULTILINE)
_SNIFF_BYTES = 1 << 16


def _looks_like_case_file(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return _CASE_KEY.search(f.read(_SNIFF_BYTES)) is not None
    except OSError:
        return False


def pytest_collect_file(file_path: Path, parent: pytest.Collector):
    if file_path.suffix not in (".yaml", ".yml"):
        return None
    explicit = any(Path(a).resolve() == file_path.resolve() for a in parent.config.args if not a.startswith("-"))
    if explicit or ("cases" in file_path.parent.parts and file_path.is_file() and _looks_like_case_file(file_path)):
        return CaseFile.from_parent(parent, path=file_path)
    return None


class CaseFile(pytest.File):
    def collect(self):
        from harness.casefiles import CaseFileError, load_matrix
        try:
            cases = load_matrix(self.path, kernel_paths=self.config.getoption("--harness-kernel-path"))
        except CaseFileError as exc:
            raise self.CollectError(str(exc)) from None
        repeat = self.config.getoption("--harness-repeat")
        for case in cases:
            if repeat == 1:
                yield CaseItem.from_parent(self, name=case.case_id, case=case)
            else:
                for i in range(repeat):
                    yield CaseItem.from_parent(self, name=f"{case.case_id}@r{i}", case=case, repeat=i)


class CaseFailed(Exception):
    def __init__(self, result, nondeterministic: bool = False):
        super().__init__(result.summary)
        self.result = result
        self.nondeterministic = nondeterministic


class CaseItem(pytest.Item):
    def __init__(self, *, case, repeat: int | None = None, **kwargs):
        super().__init__(**kwargs)
        self.case = case
        self.repeat = repeat            # None: not a repeated run

    def runtest(self) -> None:
        repeated = self.repeat is not None
        # a command case: its own result first, then one per test of its JUnit (each stored)
        results = _engine(self.config).run_all(self.case, self.repeat or 0, bitwise=repeated)
        result = results[0]
        self.config.stash.setdefault(_RESULTS_KEY, []).extend(results)
        store, run_id = _store(self.config)
        if store is not None:
            for r in results:
                store.add_result(run_id, r, extra={"nodeid": self.nodeid,
                                                   "worker": os.environ.get("PYTEST_XDIST_WORKER", "main")})
        for key in ("outcome", "code", "device", "log", "duration_s"):
            value = getattr(result, key)
            self.user_properties.append((key, getattr(value, "value", value)))
        self.user_properties.append(("label", result.label))
        lat = result.metrics.get("latency")
        if lat:                         # --harness-latency, or the case file's latency: block
            from harness.reports.latency_text import case_line
            self.user_properties += [(f"latency_{k}", lat[k]) for k in ("median_s", "ci_low_s", "ci_high_s",
                                                                          "rel_noise", "samples", "gb_per_s") if k in lat]
            self.config.stash.setdefault(_LATENCY_KEY, []).append(case_line(result))
        if result.outcome.value == "SKIPPED":
            pytest.skip(result.summary)
        if result.outcome.failed:
            raise CaseFailed(result)
        det = result.metrics.get("determinism")
        if isinstance(det, dict) and det.get("identical") is False:
            raise CaseFailed(result, nondeterministic=True)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, CaseFailed):
            r = excinfo.value.result
            if excinfo.value.nondeterministic:
                det = r.metrics["determinism"]
                lines = [f"NONDETERMINISTIC ({r.label}): outputs differ bit for bit from iteration "
                         f"{det.get('baseline_repeat')} with identical inputs", det.get("report", "")]
            else:
                lines = [f"{r.label}: {r.summary}"]
            if r.report and not excinfo.value.nondeterministic:
                lines.append(r.report)
            lines.append(f"case defined at {self.case.source}; device {r.device}; log {r.log}")
            return "\n".join(lines)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self):
        return self.path, None, f"{self.case.op} {self.case.case_id}"


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    expr = config.getoption("--harness-case-k")
    if expr:
        from harness.casefiles import ExpressionError, compile_expression
        try:
            matches = compile_expression(expr)
        except ExpressionError as exc:
            raise pytest.UsageError(str(exc)) from None
        _deselect(config, items, [i for i in items if not isinstance(i, CaseItem) or matches(i.case.case_id)])
    if config.getoption("--harness-kernel"):
        _with_kernel(config, items)
    if config.getoption("--harness-latency"):
        from harness.case import LatencySpec
        for item in items:
            if isinstance(item, CaseItem):
                item.case = item.case.with_latency(item.case.latency or LatencySpec())


def _deselect(config: pytest.Config, items: list, keep: list) -> None:
    dropped = [i for i in items if i not in keep]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


def _with_kernel(config: pytest.Config, items: list) -> None:
    """``--harness-kernel``: every case item runs that kernel (``options.with_kernel``, as the CLI's
    ``--kernel``); items of ops it lacks are deselected, one line per op says so."""
    from harness.run import options
    distinct = list({i.case.case_id: i.case for i in items if isinstance(i, CaseItem)}.values())
    if not distinct:
        return
    kernel = config.getoption("--harness-kernel")
    try:
        states = options.kernel_states(kernel, list(dict.fromkeys(c.op for c in distinct)),
                                       config.getoption("--harness-kernel-path"))
        chosen = options.with_kernel(distinct, kernel, states)
    except options.KernelError as exc:
        raise pytest.UsageError(str(exc)) from None
    by_id = {c.case_id: c for c in chosen.cases}
    for item in items:
        if isinstance(item, CaseItem) and item.case.case_id in by_id:
            item.case = by_id[item.case.case_id]
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    for line in (f"kernel: {kernel}", *chosen.notes):
        if reporter is not None:
            reporter.write_line(line)
    _deselect(config, items, [i for i in items if not isinstance(i, CaseItem) or i.case.case_id in by_id])


def _device_for_worker(config: pytest.Config):
    from harness.devices import parse_device, parse_device_list
    devices_opt, device_opt = config.getoption("--harness-devices"), config.getoption("--harness-device")
    if devices_opt:
        devices = parse_device_list(devices_opt)
        worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
        index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
        return devices[index % len(devices)]
    return parse_device(device_opt or "cpu")


def _engine(config: pytest.Config):
    engine = config.stash.get(_ENGINE_KEY, None)
    if engine is None:
        from harness.run import options
        from harness.run.engine import Engine
        engine = Engine(options.run_options(options.Settings(
            devices=(_device_for_worker(config),),
            kernel_paths=tuple(config.getoption("--harness-kernel-path")),
            golden_cache=options.golden_cache(config.getoption("--harness-golden-cache"),
                                              config.getoption("--harness-no-golden-cache")),
            golden_dtype=config.getoption("--harness-golden-dtype"),
            golden_device=config.getoption("--harness-golden-device"),
            log_dir=config.getoption("--harness-log-dir"), log_prefix="pytest-",
            log_dir_flag="--harness-log-dir",
            log_name=config.stash[_RUN_KEY]["id"] if _RUN_KEY in config.stash else None,
            log_subdir=os.environ.get("PYTEST_XDIST_WORKER", "main"),
            rules=tuple(config.getoption("--harness-rules")),
            tier=config.getoption("--harness-tier"),
            device_logs=config.getoption("--harness-device-logs"),
            blocking_rerun=not config.getoption("--harness-no-blocking-rerun"),
            intermediates=config.getoption("--harness-intermediates"),
            isolation=config.getoption("--harness-isolation"))))
        config.stash[_ENGINE_KEY] = engine
    return engine


def pytest_configure(config: pytest.Config) -> None:
    """Flags checked, a run id chosen: nothing opened, created or run (the store is resolved and
    opened only by a process that collected case items, in ``pytest_collection_finish``)."""
    if config.getoption("--harness-repeat", 1) < 1:
        raise pytest.UsageError(f"--repeat must be at least 1, got {config.getoption('--harness-repeat')}")
    from harness.run.options import MAX_REPEAT
    if config.getoption("--harness-repeat", 1) > MAX_REPEAT:     # items are built per repeat: refuse before collecting
        raise pytest.UsageError(f"--repeat must be at most {MAX_REPEAT}, got {config.getoption('--harness-repeat')}")
    from harness import trace
    trace.enable(config.getoption("--harness-debug", False) or trace.enabled_by_env())
    if config.getoption("--harness-rules", None):
        from harness.classify import default_rules
        from harness.errors import UsageError
        try:
            default_rules(extra=[Path(p) for p in config.getoption("--harness-rules")])
        except UsageError as exc:
            raise pytest.UsageError(str(exc)) from None
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:               # an xdist worker: the controller chose (or declined) the run
        if workerinput.get("harness_run"):
            config.stash[_RUN_KEY] = dict(workerinput["harness_run"])
        return
    _require_present(config)                  # once, in the controller: a bad or absent device, before collection
    if config.getoption("--harness-no-store"):
        return
    flag = config.getoption("--harness-store")
    if flag:                                  # asked for: a clear error before anything is collected or run
        from harness.store import StoreOpenError, check_path
        try:
            check_path(Path(config.invocation_params.dir, flag), create=False)
        except StoreOpenError as exc:
            raise pytest.UsageError(str(exc)) from None
    from harness.store import new_run_id
    config.stash[_RUN_KEY] = {"id": os.environ.get("HARNESS_RUN_ID") or new_run_id(), "store": flag,
                              "dir": str(config.invocation_params.dir)}


def _require_present(config: pytest.Config) -> None:
    from harness.devices import DeviceError, parse_device, parse_device_list
    from harness.run.options import golden_device, require_present
    devices_opt, device_opt = config.getoption("--harness-devices", None), config.getoption("--harness-device", None)
    try:
        golden_device(config.getoption("--harness-golden-device", "cpu"))
    except DeviceError as exc:
        raise pytest.UsageError(str(exc)) from None
    if devices_opt is None and device_opt is None:
        return                                # the default cpu: nothing to check
    try:
        devices = parse_device_list(devices_opt) if devices_opt is not None else [parse_device(device_opt)]
        require_present(devices, config.getoption("--harness-allow-absent-devices", False),
                        "--harness-allow-absent-devices")
    except DeviceError as exc:
        raise pytest.UsageError(str(exc)) from None


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """xdist controller, once per worker: every worker writes its results under the one run id."""
    run = node.config.stash.get(_RUN_KEY, None)
    if run:
        node.workerinput["harness_run"] = run


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """xdist controller: the store a worker recorded the run in (it finishes the run at the end)."""
    path = getattr(node, "workeroutput", {}).get("harness_store")
    if path:
        node.config.stash.setdefault(_OPENED_KEY, set()).add(path)


def _devices(config: pytest.Config) -> list[str]:
    from harness.devices import parse_device, parse_device_list
    devices_opt, device_opt = config.getoption("--harness-devices"), config.getoption("--harness-device")
    return [str(d) for d in (parse_device_list(devices_opt) if devices_opt else [parse_device(device_opt or "cpu")])]


def pytest_collection_finish(session: pytest.Session) -> None:
    """In the process that runs cases (each xdist worker, or the only process), when it collected
    case items: resolve and open the store, record the run and its planned cases (idempotent across
    workers) before any case runs.  A session without case items never gets here past the check."""
    config = session.config
    run = config.stash.get(_RUN_KEY, None)
    items = [item for item in session.items if isinstance(item, CaseItem)]
    if run is None or not items:
        return
    from harness.run.options import ResumeOptions, kernel_paths, store_path
    from harness.run.session import begin
    from harness.store import Store, StoreOpenError
    path = str(Path(run["dir"], store_path(run["store"])))
    try:
        store = Store(path)
    except StoreOpenError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[_STORE_KEY] = store
    config.stash.setdefault(_OPENED_KEY, set()).add(path)
    if hasattr(config, "workeroutput"):       # tell the controller, which finishes the run
        config.workeroutput["harness_store"] = path
    paths = kernel_paths(config.getoption("--harness-kernel-path"))
    command = getattr(config, "workerinput", {}).get("mainargv", sys.argv)
    begin(store, [(i.case, i.repeat or 0) for i in items], devices=_devices(config), kernel_paths=paths,
          kind="pytest", command=list(command), run_id=run["id"],
          extra={"options": ResumeOptions(tuple(sorted(set(paths))), config.getoption("--harness-golden-dtype"),
                                          config.getoption("--harness-tier"),
                                          config.getoption("--harness-golden-device")).to_dict()})


def _store(config: pytest.Config):
    store = config.stash.get(_STORE_KEY, None)
    return (store, config.stash[_RUN_KEY]["id"]) if store is not None else (None, None)


def pytest_sessionfinish(session: pytest.Session, exitstatus) -> None:
    """The controller (or the only process) closes the run, in each store it was recorded in, with a
    summary of what the store holds.  Nothing to do (and nothing opened) when no case ran."""
    config = session.config
    run = config.stash.get(_RUN_KEY, None)
    if hasattr(config, "workerinput") or run is None:
        return
    from harness.store import Store
    from harness.document.summary import summarize
    for path in sorted(config.stash.get(_OPENED_KEY, set())):
        if not Path(path).exists():
            continue
        store = config.stash.get(_STORE_KEY, None)
        own = store is None or str(store.path) != str(Path(path))
        store = Store(path) if own else store
        try:
            if store.run(run["id"]) is not None:
                store.finish_run(run["id"], {**summarize(store.results(run["id"])), "exitstatus": int(exitstatus)})
        finally:
            if own:
                store.close()


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    """With ``--repeat N``: the flake summary per case (from the store under xdist, where the
    controller runs no case).  Timed cases (``--harness-latency``): one line each, where they ran
    (under xdist the JUnit properties hold them)."""
    timed = config.stash.get(_LATENCY_KEY, [])
    if timed:
        terminalreporter.section("harness latency")
        for line in timed:
            terminalreporter.write_line(line)
    if config.getoption("--harness-repeat") <= 1 or hasattr(config, "workerinput"):
        return
    from harness.flake.summary import summarize_hunt
    from harness.reports.flake_text import summary_lines
    results = config.stash.get(_RESULTS_KEY, [])
    run = config.stash.get(_RUN_KEY, None)
    opened = sorted(p for p in config.stash.get(_OPENED_KEY, set()) if Path(p).exists())
    if run is not None and opened:
        from harness.store import Store
        with Store(opened[0]) as store:
            results = store.results(run["id"]) or results
    if not results:
        return
    terminalreporter.section("flake summary")
    for case_id, s in summarize_hunt(results).items():
        for line in summary_lines(case_id, s):
            terminalreporter.write_line(line)


def pytest_unconfigure(config: pytest.Config) -> None:
    engine = config.stash.get(_ENGINE_KEY, None)
    if engine is not None:
        engine.close()
    store = config.stash.get(_STORE_KEY, None)
    if store is not None:
        store.close()

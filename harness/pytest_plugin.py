"""pytest front end: case files become test items, run by the same engine as the CLI.

Collected: ``*.yaml``/``*.yml`` inside a directory named ``cases`` and any case
file named on the command line.  ``-k``, ``-x`` and ``--junitxml`` are pytest's
own; ``-n N`` (pytest-xdist) gives each xdist worker the device at its index
in ``--devices`` (so ``-n 8 --devices npu:0-7`` is one process per NPU).
Kernels still run in a device worker process, never in pytest's.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

_ENGINE_KEY = pytest.StashKey[object]()
_STORE_KEY = pytest.StashKey[object]()        # the open Store, in the process that runs cases
_RUN_KEY = pytest.StashKey[tuple]()           # (store path, run id), chosen by the controller
_RESULTS_KEY = pytest.StashKey[list]()        # results of this process's items (the flake summary without a store)
_LATENCY_KEY = pytest.StashKey[list]()        # this process's timed cases, one line each (--harness-latency)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("harness", "fused-kernel harness")
    group.addoption("--device", default=None, help="device for case files: cpu, cuda:N, npu:N (default cpu)")
    group.addoption("--devices", default=None,
                    help="devices for xdist workers (worker gwN gets the N-th): npu:0-7, cuda:0,cuda:1")
    group.addoption("--harness-allow-absent-devices", action="store_true",
                    help="run even when an accelerator asked for is not present (its cases SKIPPED); "
                         "without it that is a usage error before any case")
    group.addoption("--harness-kernel", default=None, metavar="NAME|pkg.mod[:fn]",
                    help="run every case with this kernel instead of its own (as harness run --kernel): a builtin, "
                         "package.module:callable or package.module; cases of ops it lacks are deselected")
    group.addoption("--kernel-path", action="append", default=[], metavar="DIR",
                    help="prepend DIR to the device workers' PYTHONPATH")
    group.addoption("--golden-cache", default=None, metavar="DIR", help="golden cache directory")
    group.addoption("--no-golden-cache", action="store_true", help="compute every golden")
    group.addoption("--golden-dtype", choices=("fp32", "fp64"), default="fp32")
    group.addoption("--golden-device", default="cpu", metavar="DEV",
                    help="compute goldens on DEV (cuda:0, npu:0) with TF32/HF32 off, as harness run --golden-device")
    group.addoption("--harness-intermediates", choices=("off", "on-failure", "always"), default="on-failure",
                    help="as harness run --intermediates (docs/intermediates.md)")
    group.addoption("--harness-tier", choices=("auto", "all"), default="auto",
                    help="all: run device-tier cases on cpu too")
    group.addoption("--case-k", default=None, metavar="EXPR",
                    help="select cases with the harness's -k grammar (substrings may hold '=', '(' and ','; "
                         "and/or/not), e.g. --case-k 'slot_mode=padded(0.25) and batch=16'")
    group.addoption("--harness-rules", action="append", default=[], metavar="FILE",
                    help="extra classifier rules (YAML); harness-rules.yaml in the cwd is read too")
    group.addoption("--harness-log-dir", default=None, help="per-case logs (default reports/logs/pytest-<run id>)")
    group.addoption("--harness-device-logs", action="store_true",
                    help="capture the device runtime's log files on every device (always on for npu)")
    group.addoption("--harness-no-blocking-rerun", action="store_true",
                    help="do not re-run a device fault once with ASCEND_LAUNCH_BLOCKING=1 / CUDA_LAUNCH_BLOCKING=1")
    group.addoption("--store", default=None, metavar="PATH",
                    help="results database (default $HARNESS_STORE or reports/results.sqlite)")
    group.addoption("--no-store", action="store_true", help="do not record case results")
    group.addoption("--harness-debug", action="store_true",
                    help="trace worker spawns, the worker protocol, replacements and kills on stderr "
                         "(also HARNESS_DEBUG=1)")
    group.addoption("--harness-latency", action="store_true",
                    help="time every case whose checks pass, as harness run --latency (docs/latency.md): the "
                         "median and its interval go into the JUnit properties and the terminal summary")
    group.addoption("--repeat", type=int, default=1, metavar="N",
                    help="run every case N times (a flake hunt): identical inputs, outputs compared bit for bit "
                         "with the first iteration; a per-case failure rate is printed at the end")


def pytest_collect_file(file_path: Path, parent: pytest.Collector):
    if file_path.suffix not in (".yaml", ".yml"):
        return None
    explicit = any(Path(a).resolve() == file_path.resolve() for a in parent.config.args if not a.startswith("-"))
    if explicit or "cases" in file_path.parent.parts:
        return CaseFile.from_parent(parent, path=file_path)
    return None


class CaseFile(pytest.File):
    def collect(self):
        from harness.casefiles import CaseFileError, load_matrix
        try:
            cases = load_matrix(self.path)
        except CaseFileError as exc:
            raise self.CollectError(str(exc)) from None
        repeat = self.config.getoption("--repeat")
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
    expr = config.getoption("--case-k")
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
                                       config.getoption("--kernel-path"))
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
    devices_opt, device_opt = config.getoption("--devices"), config.getoption("--device")
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
            kernel_paths=tuple(config.getoption("--kernel-path")),
            golden_cache=options.golden_cache(config.getoption("--golden-cache"),
                                              config.getoption("--no-golden-cache")),
            golden_dtype=config.getoption("--golden-dtype"),
            golden_device=config.getoption("--golden-device"),
            log_dir=config.getoption("--harness-log-dir"), log_prefix="pytest-",
            log_dir_flag="--harness-log-dir",
            log_name=config.stash[_RUN_KEY][1] if _RUN_KEY in config.stash else None,
            log_subdir=os.environ.get("PYTEST_XDIST_WORKER", "main"),
            rules=tuple(config.getoption("--harness-rules")),
            tier=config.getoption("--harness-tier"),
            device_logs=config.getoption("--harness-device-logs"),
            blocking_rerun=not config.getoption("--harness-no-blocking-rerun"),
            intermediates=config.getoption("--harness-intermediates"))))
        config.stash[_ENGINE_KEY] = engine
    return engine


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--repeat", 1) < 1:
        raise pytest.UsageError(f"--repeat must be at least 1, got {config.getoption('--repeat')}")
    from harness.run.options import MAX_REPEAT
    if config.getoption("--repeat", 1) > MAX_REPEAT:     # items are built per repeat: refuse before collecting
        raise pytest.UsageError(f"--repeat must be at most {MAX_REPEAT}, got {config.getoption('--repeat')}")
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
    if workerinput is None:                   # once, in the controller: a bad or absent device, before collection
        _require_present(config)
    if workerinput is not None:               # an xdist worker: the controller chose (or declined) the run
        if workerinput.get("harness_run_id"):
            config.stash[_RUN_KEY] = (workerinput["harness_store"], workerinput["harness_run_id"])
        return
    if config.getoption("--no-store"):
        return
    from harness.run.options import store_path
    from harness.store import StoreOpenError, check_path, new_run_id
    path = Path(config.invocation_params.dir, store_path(config.getoption("--store")))
    try:
        check_path(path, create=False)        # a clear error before anything is collected or run
    except StoreOpenError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[_RUN_KEY] = (str(path), os.environ.get("HARNESS_RUN_ID") or new_run_id())


def _require_present(config: pytest.Config) -> None:
    from harness.devices import DeviceError, parse_device, parse_device_list
    from harness.run.options import golden_device, require_present
    devices_opt, device_opt = config.getoption("--devices", None), config.getoption("--device", None)
    try:
        golden_device(config.getoption("--golden-device", "cpu"))
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
    path_and_id = node.config.stash.get(_RUN_KEY, None)
    if path_and_id:
        node.workerinput["harness_store"], node.workerinput["harness_run_id"] = path_and_id


def _devices(config: pytest.Config) -> list[str]:
    from harness.devices import parse_device, parse_device_list
    devices_opt, device_opt = config.getoption("--devices"), config.getoption("--device")
    return [str(d) for d in (parse_device_list(devices_opt) if devices_opt else [parse_device(device_opt or "cpu")])]


def pytest_collection_finish(session: pytest.Session) -> None:
    """In the process that runs cases (each xdist worker, or the only process): open the store and
    record the run and its planned cases (idempotent across workers) before any case runs."""
    config = session.config
    path_and_id = config.stash.get(_RUN_KEY, None)
    items = [item for item in session.items if isinstance(item, CaseItem)]
    if path_and_id is None or not items:
        return
    from harness.run.options import ResumeOptions, kernel_paths
    from harness.run.session import begin
    from harness.store import Store, StoreOpenError
    path, run_id = path_and_id
    try:
        store = Store(path)
    except StoreOpenError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[_STORE_KEY] = store
    paths = kernel_paths(config.getoption("--kernel-path"))
    command = getattr(config, "workerinput", {}).get("mainargv", sys.argv)
    begin(store, [(i.case, i.repeat or 0) for i in items], devices=_devices(config), kernel_paths=paths,
          kind="pytest", command=list(command), run_id=run_id,
          extra={"options": ResumeOptions(tuple(sorted(set(paths))), config.getoption("--golden-dtype"),
                                          config.getoption("--harness-tier"),
                                          config.getoption("--golden-device")).to_dict()})


def _store(config: pytest.Config):
    store = config.stash.get(_STORE_KEY, None)
    return (store, config.stash[_RUN_KEY][1]) if store is not None else (None, None)


def pytest_sessionfinish(session: pytest.Session, exitstatus) -> None:
    """The controller (or the only process) closes the run with a summary of what the store holds."""
    config = session.config
    if hasattr(config, "workerinput") or config.stash.get(_RUN_KEY, None) is None:
        return
    path, run_id = config.stash[_RUN_KEY]
    if not Path(path).exists():
        return
    from harness.summary import summarize
    from harness.store import Store
    store = config.stash.get(_STORE_KEY, None)
    own = store is None
    store = store or Store(path)
    try:
        if store.run(run_id) is not None:
            store.finish_run(run_id, {**summarize(store.results(run_id)), "exitstatus": int(exitstatus)})
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
    if config.getoption("--repeat") <= 1 or hasattr(config, "workerinput"):
        return
    from harness.flake.summary import summarize_hunt
    from harness.reports.flake_text import summary_lines
    results = config.stash.get(_RESULTS_KEY, [])
    path_and_id = config.stash.get(_RUN_KEY, None)
    if path_and_id is not None and Path(path_and_id[0]).exists():
        from harness.store import Store
        with Store(path_and_id[0]) as store:
            results = store.results(path_and_id[1]) or results
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

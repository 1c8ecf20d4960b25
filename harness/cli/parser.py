"""The ``harness`` argument parser: every subcommand's flags, and the flag value checks."""
from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from harness import __version__
from harness.casefiles.loader import MAX_CASES
from harness.casefiles.values import MAX_SEED
from harness.flake.hunt import SEED_MODES
from harness.latency.statistics import MAX_ROUNDS, MIN_ROUNDS
from harness.logs import LOG_CAP_BYTES
from harness.run.options import MAX_REPEAT
from harness.run.pool import ISOLATION_MODES
from harness.shard.split import ShardError, parse_shard
from harness.store import DEFAULT_STORE
from harness.reports.history import KIND_FAMILIES

MAX_SHARDS = 10_000     # no real split comes near; the split's plan is built per shard


class _Parser(argparse.ArgumentParser):
    """Flag errors as one line (``harness run: error: ...``), like every other usage error."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


def _add_selection(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="*", default=["cases"], help="case files or directories (default: cases)")
    p.add_argument("-k", dest="expr", default=None, help="select cases whose id matches EXPR (and/or/not)")
    p.add_argument("--max-cases", type=positive_int("--max-cases"), default=MAX_CASES, metavar="N",
                   help=f"refuse case files that expand to more than N cases (default {MAX_CASES})")
    p.add_argument("--tier", choices=("auto", "ci", "device", "all"), default="auto",
                   help="auto: every case, device-tier ones skipped on cpu; ci/device: only that tier; "
                        "all: every case, device tier run on cpu too")


def _add_tests(p: argparse.ArgumentParser) -> None:
    p.add_argument("--test", dest="tests", action="append", default=None, metavar="NODEID",
                   help="command cases: only this JUnit test decides (an id case::test as the results name it, or "
                        "a glob such as '*test_stateless*'); repeatable")


def _add_store(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", default=None, metavar="PATH",
                   help=f"results database (default $HARNESS_STORE or {DEFAULT_STORE})")


def _add_outputs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", dest="json_path", default=None, metavar="FILE", help="results and summary as JSON")
    p.add_argument("--junit", default=None, metavar="FILE", help="JUnit XML (one testcase per result)")
    p.add_argument("--markdown", default=None, metavar="FILE", help="Markdown summary for a PR comment")
    p.add_argument("--html", default=None, metavar="FILE", help="one self-contained HTML report")


def _add_intermediates(p: argparse.ArgumentParser) -> None:
    """--intermediates (docs/intermediates.md); a flake hunt's default is off (set per command)."""
    p.add_argument("--intermediates", choices=("off", "on-failure", "always"), default=None,
                   help="compare the intermediates a kernel dumps with the goldens' (docs/intermediates.md): "
                        "on-failure (default; flake, audit: off) launches a failing case once more with dump, always "
                        "dumps on every case")


def _add_execution(p: argparse.ArgumentParser) -> None:
    """Options of every command that runs cases (run, flake, compare, bisect)."""
    p.add_argument("--device", type=nonempty("--device"), default=None, help="cpu, cuda:N or npu:N (default cpu)")
    p.add_argument("--devices", type=nonempty("--devices"), default=None,
                   help="several devices, one worker each: npu:0-7, cuda:0,cuda:1")
    p.add_argument("--allow-absent-devices", action="store_true",
                   help="run even when an accelerator asked for is not present (its cases SKIPPED, exit 0); "
                        "without it that is exit 2 before any case")
    p.add_argument("--kernel", default=None, metavar="NAME|pkg.mod[:fn]",
                   help="run every selected case with this kernel instead of its own (ids unchanged): a builtin, "
                        "package.module:callable (for every op) or package.module (one function per op, named "
                        "like the op); cases of ops it lacks are not run")
    p.add_argument("--kernel-path", action="append", default=[], metavar="DIR",
                   help="prepend DIR to the workers' PYTHONPATH (repeatable)")
    p.add_argument("--golden-cache", default=None, metavar="DIR",
                   help="golden cache directory (default $HARNESS_GOLDEN_CACHE or ~/.cache/...)")
    p.add_argument("--no-golden-cache", action="store_true",
                   help="do not keep goldens between runs (a run still computes each distinct golden once)")
    p.add_argument("--golden-dtype", choices=("fp32", "fp64"), default="fp32")
    p.add_argument("--golden-device", type=nonempty("--golden-device"), default="cpu", metavar="DEV",
                   help="compute goldens (and draw their inputs) on DEV, e.g. cuda:0 or npu:0, in --golden-dtype "
                        "with TF32/HF32 off (default: the host CPU); its goldens are cached apart from the host's")
    p.add_argument("--log-dir", default=None, help="per-case logs (default reports/logs/<a name of the run's own>; in a git "
                   "checkout that is not a harness project, under ~/.cache/fused-kernel-harness/repos/)")
    p.add_argument("--max-log-mb", type=positive_int("--max-log-mb", 1 << 20), default=LOG_CAP_BYTES >> 20,
                   metavar="MB", help=f"cut each case log longer than this to its head and tail, with a "
                                      f"'[... N bytes dropped ...]' line between (default {LOG_CAP_BYTES >> 20})")
    p.add_argument("--rules", action="append", default=[], metavar="FILE",
                   help="extra classifier rules (YAML; harness-rules.yaml in the cwd is read too)")
    p.add_argument("--device-logs", action="store_true",
                   help="capture the device runtime's log files (ASCEND_PROCESS_LOG_PATH, one directory per worker "
                        "under the run's logs) on every device; always on for npu (docs/ascend.md)")
    p.add_argument("--no-blocking-rerun", action="store_true",
                   help="do not re-run a DEVICE_FAULT / ORCH_ERROR case on an accelerator once with "
                        "ASCEND_LAUNCH_BLOCKING=1 / CUDA_LAUNCH_BLOCKING=1")
    p.add_argument("--isolation", choices=ISOLATION_MODES, default="warm",
                   help="warm (default): cases share a warm worker, checked for what each kernel leaves behind; "
                        "case: every case in a fresh worker (forked from the pristine zygote on cpu, spawned "
                        "elsewhere), so nothing a kernel does in its process reaches the next case (slower: "
                        "docs/benchmarks.md, \"Isolation per case\")")
    p.add_argument("--no-progress", action="store_true", help="plain line-per-case output")
    _add_intermediates(p)
    p.add_argument("--no-color", action="store_true", help="plain output without colours (as when not a TTY)")
    _add_store(p)
    p.add_argument("--no-store", action="store_true", help="keep results in memory only")
    p.add_argument("--seed", type=seed("--seed"), default=None, help="run every selected case with this input seed "
                   "(replays one iteration of a fresh-seed hunt)")
    _add_outputs(p)


def _add_latency(p: argparse.ArgumentParser, *, across: bool = False, switch: bool = True) -> None:
    """Timing each case after its checks pass (docs/latency.md); ``across``: refs compared by latency;
    ``switch``: a ``--latency`` flag (bisect's ``--slower-than`` implies it)."""
    if not switch:
        p.set_defaults(latency=False)
    else:
        p.add_argument("--latency", action="store_true",
                       help="time every case whose checks pass (median, 95%% CI, noise; GB/s) and store it with "
                            "its result; a case file's latency: block sets its own settings")
    p.add_argument("--latency-target", type=percent("--latency-target"), default=None, metavar="PCT",
                   help="sample until the median's 95%% CI half-width is under PCT of it (default 2%%)")
    p.add_argument("--latency-budget", type=positive_float("--latency-budget"), default=None, metavar="S",
                   help="at most S seconds of samples per case (default 1; then the noise reached is reported)")
    p.add_argument("--latency-cold", choices=("auto", "on", "off"), default=None,
                   help="flush the caches before each sample (auto: on for accelerators, off on cpu)")
    p.add_argument("--latency-clock", choices=("auto", "cpu", "wall"), default=None,
                   help="on the host: the process's CPU time (auto, cpu: another tenant's load is not counted) "
                        "or the wall clock (perf_counter_ns); accelerators use device events")
    if across:
        p.add_argument("--latency-threshold", type=percent("--latency-threshold"), default=None, metavar="PCT",
                       help="a ratio beyond 1 +/- PCT (its whole 99%% CI) is SLOWER/FASTER (default 5%%)")
        p.add_argument("--latency-rounds", type=positive_int("--latency-rounds", 1000), default=None, metavar="N",
                       help=f"at most N rounds of A, B, B, A... per case: {MIN_ROUNDS}, then more while a case is "
                            f"UNSURE (default {MAX_ROUNDS})")


def _add_slower_than(p: argparse.ArgumentParser) -> None:
    p.add_argument("--slower-than", type=percent("--slower-than"), default=None, metavar="PCT",
                   help="look for the first commit whose kernel is slower than the good commit's by more than "
                        "PCT (latency in rounds against good, in this session; docs/latency.md)")
    p.add_argument("--latency-rounds", type=positive_int("--latency-rounds", 1000), default=None, metavar="N",
                   help=f"with --slower-than: at most N rounds per step, {MIN_ROUNDS} then more while UNSURE "
                        f"(default {MAX_ROUNDS})")
    _add_latency(p, switch=False)


def percent(flag: str):
    """``5%`` or ``0.05``, above 0% and below 100%."""
    def parse(text: str) -> float:
        from harness.latency.statistics import check_threshold, parse_percent
        try:
            return check_threshold(parse_percent(text), flag)
        except ValueError as exc:
            said = str(exc)
            raise argparse.ArgumentTypeError(said.removeprefix(f"{flag}: ") if said.startswith(flag)
                                             else f"not a percentage: {text!r}") from None
    return parse


def positive_float(flag: str):
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag}: not a number: {text!r}") from None
        if not (v > 0 and v < float("inf")):
            raise argparse.ArgumentTypeError(f"{flag}: must be above 0, got {text}")
        return v
    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="harness", description="Correctness harness for fused LLM kernels.")
    parser.add_argument("--version", action="version", version=f"harness {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true",
                        help="trace worker spawns, the worker protocol, replacements and kills on stderr "
                             "(also HARNESS_DEBUG=1)")

    p_list = sub.add_parser("list", parents=[common], help="expand and validate case files, print case ids")
    _add_selection(p_list)
    p_list.add_argument("--kernel-path", action="append", default=[], metavar="DIR",
                        help="where spec case files' modules are found (docs/specs.md; repeatable)")

    p_run = sub.add_parser("run", parents=[common], help="run cases on a device")
    _add_selection(p_run)
    _add_execution(p_run)
    _add_latency(p_run)
    p_run.add_argument("--latency-baseline", default=None, metavar="RUN_ID",
                       help="with --latency: compare each case's latency with stored run RUN_ID's (SLOWER: exit 1; "
                            "not interleaved, so the two runs' conditions may differ: compare --latency is the fair test)")
    p_run.add_argument("--latency-threshold", type=percent("--latency-threshold"), default=None, metavar="PCT",
                       help="with --latency-baseline: a ratio beyond 1 +/- PCT (its whole 95%% CI) is SLOWER/FASTER "
                            "(default 5%%)")
    p_run.add_argument("-x", "--exitfirst", action="store_true", help="stop after the first failure")
    p_run.add_argument("--shard", type=shard, default=None, metavar="I/N",
                       help="run only shard I of N (1-based; deterministic: every host computes the same split)")
    p_run.add_argument("--shard-durations", default=None, metavar="SOURCE",
                       help="balance shards by the durations in SOURCE (a --json report or a store, not "
                            "this run's own); default: by count, never by the store's durations. Give every "
                            "shard the same SOURCE, or they split differently (report --merge notices)")
    p_run.add_argument("--resume", default=None, metavar="RUN_ID",
                       help="run only the cases RUN_ID planned and has no result for (cases, kernel paths, "
                            "golden dtype and tier come from that run)")

    p_audit = sub.add_parser("audit", parents=[common],
                             help="run the matrix with each mutation operator: which bug classes it misses")
    _add_selection(p_audit)
    _add_execution(p_audit)
    p_audit.add_argument("--mutants", default=None, metavar="NAMES",
                         help="comma-separated operators to run (default: all; docs/audit.md lists them)")
    p_audit.add_argument("--min-score", type=fraction("--min-score"), default=None, metavar="S",
                         help="exit 0 when the score (killed / applicable mutants) is at least S (0..1), "
                              "instead of only when every applicable mutant is killed")
    p_audit.add_argument("--delta", type=fraction("--delta"), default=None, metavar="D",
                         help="head_perturbed scales one head by 1 + D (default: per op, the smallest D a "
                              "4-run sensitivity search finds the tolerances detect, up to 1)")
    p_audit.add_argument("--sensitivity", action="store_true",
                         help="also find, per op's first output, the smallest relative error of one head (and "
                              "of a quarter of one) the tolerances detect: 16 more runs of the matrix")

    p_flake = sub.add_parser("flake", parents=[common],
                             help="run cases N times: failure rate, intervals, bitwise determinism")
    _add_selection(p_flake)
    _add_tests(p_flake)
    _add_execution(p_flake)
    p_flake.add_argument("--repeat", type=positive_int("--repeat", MAX_REPEAT), default=None,
                         help="iterations per case (default 20; with --until-fail, the cap, default 1000)")
    _add_seeds(p_flake, fixed="identical inputs every iteration, outputs compared bit for bit across iterations",
               fresh="a new recorded seed per iteration")
    p_flake.add_argument("--until-fail", action="store_true", help="stop a case at its first failure")
    p_flake.add_argument("--stop-after", type=positive_int("--stop-after"), default=None, metavar="K",
                         help="stop a case after K failures")
    p_flake.add_argument("--max-minutes", type=float, default=None, help="stop starting iterations after this")
    p_flake.add_argument("--confidence", type=float, default=0.95, help="interval confidence (default 0.95)")
    p_flake.add_argument("--target-rate", type=float, default=None, metavar="RATE",
                         help="for a clean case, say how many more clean runs would bound its rate at RATE")
    p_flake.add_argument("--allow-nondeterministic", action="store_true",
                         help="bits that vary between iterations (values within tolerance) do not fail the hunt")
    p_flake.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"), default=None,
                         help="compare two stored hunts (run ids, or --json files): failure-rate change per "
                              "case with a Fisher exact test; runs nothing")
    _add_refs(p_flake)
    _add_latency(p_flake)
    p_flake.add_argument("--ref", default=None, metavar="NAME=REV",
                         help="hunt on this commit of --repo (checked out, built and given its --env as compare "
                              "does) instead of the kernels on the current PYTHONPATH")
    p_flake.add_argument("--resume", default=None, metavar="RUN_ID",
                         help="run only the iterations hunt RUN_ID planned and has no result for (cases, seeds, "
                              "repeats, stop rules and its ref come from that hunt); the summary covers the whole hunt")

    p_cmp = sub.add_parser("compare", parents=[common],
                           help="the same cases x N on several kernel-library refs, as a PR table")
    _add_selection(p_cmp)
    _add_tests(p_cmp)
    _add_execution(p_cmp)
    _add_refs(p_cmp)
    _add_latency(p_cmp, across=True)
    p_cmp.add_argument("--ref", dest="refs", action="append", default=[], metavar="NAME=REV",
                       help="a ref to run (sha, branch, tag, remote ref of a fork); repeat; the first is the "
                            "baseline, the last the candidate")
    p_cmp.add_argument("--repeat", type=positive_int("--repeat", MAX_REPEAT), default=None,
                       help="runs per case per ref (default 5)")
    _add_seeds(p_cmp, fixed="each case's own seed every repeat",
               fresh="a new recorded seed per repeat, the same on every ref (paired)")
    p_cmp.add_argument("--changed", action="store_true",
                       help="the terminal table shows only the cases whose verdict is not unchanged (the report "
                            "files keep every case)")
    p_cmp.add_argument("--resume", default=None, metavar="COMPARE_ID",
                       help="continue a stored compare: only the repeats no ref has a result for run (its refs, "
                            "cases, repeats and seeds come from the store); the table covers the whole compare")

    p_bis = sub.add_parser("bisect", parents=[common],
                           help="the first commit of the kernel library that shows a failure, "
                                "even when it reproduces only sometimes")
    _add_selection(p_bis)
    _add_tests(p_bis)
    _add_execution(p_bis)
    _add_refs(p_bis)
    p_bis.add_argument("--good", default=None, metavar="REV", help="a commit without the failure")
    p_bis.add_argument("--bad", default=None, metavar="REV", help="a commit with it")
    p_bis.add_argument("--signature", default=None, metavar="OUTCOME[:CODE]",
                       help="the failure to look for (MISMATCH, DEVICE_FAULT:507018, FAIL_507018, CRASH:SIGSEGV); "
                            "default: the first failure seen at the bad commit")
    p_bis.add_argument("--confidence", type=float, default=0.99, help="stop when one commit holds this posterior")
    p_bis.add_argument("--first-parent", action="store_true", help="follow only first parents (merge-heavy history)")
    p_bis.add_argument("--max-runs", type=positive_int("--max-runs"), default=300, help="run budget (default 300)")
    p_bis.add_argument("--good-runs", type=int, default=0, metavar="N",
                       help="run the good commit N times right after the first sighting, as a smoke test "
                            "(default 0: it is run when that is informative; docs/bisect.md)")
    p_bis.add_argument("--max-bad-runs", type=positive_int("--max-bad-runs"), default=50, metavar="N",
                       help="give up (NOT_REPRODUCED) after N clean runs at the bad commit (default 50)")
    p_bis.add_argument("--p-prior", default=None, metavar="from-store|RATE|none",
                       help="the prior on the failure's reproduction probability: the case's rate stored at the "
                            "bad commit (from-store; the default when at least 10 runs are stored), a RATE in "
                            "(0, 1] weighed as 10 runs, or none (docs/bisect.md)")
    p_bis.add_argument("--resume", default=None, metavar="BISECT_ID",
                       help="continue a stored bisect (its cases, refs and options come from the store)")
    _add_slower_than(p_bis)

    p_brun = sub.add_parser("bisect-run", parents=[common],
                            help="for `git bisect run`: exit 0 good, 1 bad, 125 skip, nothing else")
    _add_selection(p_brun)
    _add_tests(p_brun)
    _add_execution(p_brun)
    p_brun.add_argument("--signature", default=None, metavar="OUTCOME[:CODE]",
                        help="bad only when this failure shows (other failures: skip); default: any failure is bad")
    p_brun.add_argument("--repeat", type=positive_int("--repeat", MAX_REPEAT), default=None,
                        help="runs per case; bad if the signature shows in any (for flaky failures); default: "
                             "from --p-prior, the runs after which a bad commit shows nothing 1%% of the time, "
                             "else 1")
    p_brun.add_argument("--p-prior", default=None, metavar="from-store|RATE|none",
                        help="the failure's reproduction probability behind the default --repeat: the rate "
                             "stored at git bisect's bad commit (from-store; the default with at least 10 runs "
                             "and --signature), a RATE in (0, 1] weighed as 10 runs, or none (1 run)")
    p_brun.add_argument("--build", default=None, metavar="CMD", help="run first in the current directory; "
                        "a failing build is a skip (125)")
    p_brun.add_argument("--build-timeout", type=float, default=1800.0, metavar="S")
    _add_slower_than(p_brun)
    p_brun.add_argument("--good", default=None, metavar="REV",
                        help="with --slower-than: the good commit the checkout is measured against")
    p_brun.add_argument("--env", dest="env_templates", action="append", default=None, metavar="KEY=TEMPLATE",
                        help="with --slower-than: each commit's environment, as compare's --env")
    p_brun.add_argument("--worktree-cache", default=None, metavar="DIR",
                        help="with --slower-than: where the good commit and the checkout are checked out")

    p_ops = sub.add_parser("ops", parents=[common],
                           help="each op's kernel arguments: role, shape, dtype, layout, what it may write and return")
    p_ops.add_argument("op", nargs="?", default=None,
                       help="one op (default: every op), or a spec case file (FILE.yaml): its spec op's table "
                            "(docs/specs.md)")
    p_ops.add_argument("--kernel-path", action="append", default=[], metavar="DIR",
                       help="where a spec case file's module is found (docs/specs.md; repeatable)")
    p_ops.add_argument("--spec", default=None, metavar="MODULE",
                       help="a TensorSpec module's table without a case file (docs/specs.md)")
    p_ops.add_argument("--params", action="append", default=[], metavar="NAME=VALUE",
                       help="with --spec: a build_tensor_specs argument (repeatable; NAME=[A,B] a table per value)")
    p_ops.add_argument("--golden", default=None, metavar="NAME",
                       help="with --spec: the module's golden function (when it has several golden_*)")
    p_ops.add_argument("--geometry", default=None, metavar="PRESET[,FIELD=V...]",
                       help="shapes in numbers for a preset (tiny, qwen3-14b), fields overridden as in a case file "
                            "(tiny,batch=2); seq_len=N sizes MB, max_pos, N and T for sequences of N tokens")
    p_ops.add_argument("--markdown", action="store_true", help="the Markdown tables of docs/contracts.md")

    p_dumps = sub.add_parser("dumps", parents=[common],
                             help="compare a folder of intermediates dumped elsewhere with a case's goldens "
                                  "(docs/intermediates.md)")
    p_dumps.add_argument("case_id", help="the case whose inputs (from its seed) made the dumps")
    p_dumps.add_argument("folder", help="one file per intermediate: <name>.pt, <name>.npy or <name>.bin + <name>.json")
    p_dumps.add_argument("--cases", dest="paths", action="append", default=None, metavar="PATH",
                         help="case files or folders holding the case (repeatable; default: cases)")
    p_dumps.add_argument("--golden-cache", default=None, metavar="DIR")
    p_dumps.add_argument("--no-golden-cache", action="store_true")
    p_dumps.add_argument("--golden-dtype", choices=("fp32", "fp64"), default="fp32")
    p_dumps.add_argument("--json", default=None, metavar="FILE", help="write the table of intermediates as JSON")
    p_dumps.add_argument("--kernel-path", action="append", default=[], metavar="DIR",
                         help="where a spec case file's module is found (docs/specs.md; repeatable)")

    p_rep = sub.add_parser("report", parents=[common],
                           help="render a stored run, a --json file or merged shards in any format")
    p_rep.add_argument("source", nargs="?", default=None,
                       help="a run id in the store, or a --json file (default: the newest stored run)")
    p_rep.add_argument("--merge", nargs="+", default=None, metavar="SOURCE",
                       help="merge shard outputs (--json files, stores, or STORE::RUN_ID) into one report")
    p_rep.add_argument("--force", action="store_true",
                       help="merge sources that do not belong together anyway (other matrices, harness versions or "
                            "splits, overlapping or gapped shard plans; warnings say what)")
    _add_store(p_rep)
    _add_outputs(p_rep)

    p_hist = sub.add_parser("history", parents=[common], help="a case's results across stored runs")
    p_hist.add_argument("pattern", help="case id: a glob with * and ?, else a substring")
    p_hist.add_argument("--kind", choices=tuple(KIND_FAMILIES), default=None,
                        help="only runs of this command (bisect: its steps and bisect-run too; compare: its refs; "
                             "audit: its unmutated runs)")
    p_hist.add_argument("--limit", type=int, default=50,
                        help="newest N entries (default 50; a bisect or compare is one entry with its steps)")
    p_hist.add_argument("--mutants", action="store_true",
                        help="also list an audit's mutant runs of the case, named, under the audit "
                             "(never counted as the case's)")
    _add_store(p_hist)
    return parser


def _add_seeds(p: argparse.ArgumentParser, *, fixed: str, fresh: str) -> None:
    # Default None, not "fixed": --resume refuses a --seeds the user gave, and must tell it from the default.
    p.add_argument("--seeds", choices=SEED_MODES, default=None, help=f"fixed (default): {fixed}; fresh: {fresh}")
    p.add_argument("--hunt-seed", type=seed("--hunt-seed"), default=None,
                   help="with --seeds fresh, the seeds derive from this (default: random, printed and stored)")


def _add_refs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--repo", default=None, metavar="PATH", help="the kernel library's git repository")
    p.add_argument("--env", dest="env_templates", action="append", default=None, metavar="KEY=TEMPLATE",
                   help="per-ref environment, e.g. 'PYTHONPATH={worktree}/python:{PYTHONPATH}' or "
                        "'PYPTO_ROOT={worktree}' (repeatable; added to the default 'PYTHONPATH={worktree}:{PYTHONPATH}', "
                        "which a PYTHONPATH= template replaces)")
    p.add_argument("--build", default=None, metavar="CMD", help="run in each ref's worktree before its cases "
                   "(once per commit; a failing build is BUILD_ERROR for that ref)")
    p.add_argument("--build-timeout", type=float, default=1800.0, metavar="S", help="default 1800 s")
    p.add_argument("--worktree-cache", default=None, metavar="DIR",
                   help="where refs are checked out (default $HARNESS_WORKTREE_CACHE or ~/.cache/harness/worktrees)")


def positive_int(flag: str, maximum: int | None = None):
    """An argparse ``type``: a whole number of at least 1 (at most ``maximum``), the error naming ``flag``."""
    return _whole(flag, 1, maximum)


def seed(flag: str):
    """An argparse ``type``: an input seed, a whole number torch can seed with."""
    return _whole(flag, 0, MAX_SEED)


def _whole(flag: str, minimum: int, maximum: int | None):
    def parse(text: str) -> int:
        digits = sum(c.isdigit() for c in text)
        if digits > 32:     # no flag takes more than 19 digits; past 4300 int() itself refuses
            raise argparse.ArgumentTypeError(f"{flag}: a number of {digits} digits, larger than it takes"
                                             + (f" (at most {maximum})" if maximum is not None else ""))
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} takes a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{flag} must be at least {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"{flag} must be at most {maximum}, got {value}")
        return value
    return parse


def fraction(flag: str):
    """A number in [0, 1]."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag}: {text!r} is not a number") from None
        if not 0 <= value <= 1:
            raise argparse.ArgumentTypeError(f"{flag}: {text} is not between 0 and 1")
        return value
    return parse


def nonempty(flag: str):
    """An argparse ``type``: text that is not blank (``--device ""`` must not mean the default)."""
    def parse(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(f"{flag} is empty")
        return text
    return parse


def shard(text: str) -> str:
    """An argparse ``type`` for ``--shard I/N``: checked here, with N bounded; kept as text."""
    try:
        parsed = parse_shard(text)
    except ShardError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if parsed.total > MAX_SHARDS:
        raise argparse.ArgumentTypeError(f"--shard {text!r}: at most {MAX_SHARDS} shards, got {parsed.total}")
    return text

"""Flake hunts: the same cases many times, and what the repeats say.

A hunt is a plan of ``Planned`` iterations fed to the one engine; this module
owns the plan (seeds fixed or fresh, iteration-major order so a deadline
leaves every case with about as many runs), the stop rules (after K failures
of a case, at a deadline), and the per-case summary: counts per outcome,
failure rate with its Wilson and exact intervals, the zero-failure bound, the
first failure with its seed and log, and the bitwise-determinism finding of a
fixed-seed hunt.  ``compare_hunts`` sets two hunts side by side with a Fisher
exact test.  Rendering to the terminal is here too (plain lines, as engineers
write them); JSON, Markdown and HTML read the summaries this module builds.
"""
from __future__ import annotations

import hashlib
import math
import time
from collections import Counter
from dataclasses import dataclass
from typing import Iterable

from harness import stats
from harness.case import Case
from harness.run.engine import Planned
from harness.outcomes import Outcome, Result

SEED_MODES = ("fixed", "fresh")
SIGNIFICANCE = 0.05


@dataclass(frozen=True)
class HuntOptions:
    repeat: int
    seeds: str = "fixed"
    stop_after: int | None = None        # stop a case after this many failures (--until-fail: 1)
    max_minutes: float | None = None
    conf: float = 0.95
    target_rate: float | None = None     # "N more clean runs would bound the rate at ..."
    hunt_seed: int = 0                   # fresh seeds derive from it, so a whole hunt replays

    def __post_init__(self):
        if isinstance(self.repeat, bool) or not isinstance(self.repeat, int) or self.repeat < 1:
            raise ValueError(f"--repeat must be a whole number >= 1, got {self.repeat!r}")
        if self.seeds not in SEED_MODES:
            raise ValueError(f"--seeds must be one of {', '.join(SEED_MODES)}, got {self.seeds!r}")
        if self.stop_after is not None and self.stop_after < 1:
            raise ValueError(f"--stop-after must be >= 1, got {self.stop_after!r}")
        if self.max_minutes is not None and not self.max_minutes > 0:
            raise ValueError(f"--max-minutes must be > 0, got {self.max_minutes!r}")
        if not 0 < self.conf < 1:
            raise ValueError(f"--confidence must be in (0, 1), got {self.conf!r}")
        if self.target_rate is not None and not 0 < self.target_rate < 1:
            raise ValueError(f"--target-rate must be in (0, 1), got {self.target_rate!r}")


def fresh_seed(hunt_seed: int, case_id: str, iteration: int) -> int:
    """A seed per (hunt, case, iteration): different every iteration, the same on a replay."""
    digest = hashlib.sha256(f"{hunt_seed}\0{case_id}\0{iteration}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def plan(cases: list[Case], options: HuntOptions) -> list[Planned]:
    """Iteration-major: every case's iteration i before any case's i+1."""
    planned = []
    for i in range(options.repeat):
        for case in cases:
            if options.seeds == "fresh":
                planned.append(Planned(len(planned), case.with_seed(fresh_seed(options.hunt_seed, case.case_id, i)), i))
            else:
                planned.append(Planned(len(planned), case, i, bitwise=True))
    return planned


class StopRules:
    """``should_run`` for ``Engine.run``: drop a case's iterations after K failures, all at a deadline."""

    def __init__(self, options: HuntOptions, now: float | None = None):
        self.options = options
        start = time.monotonic() if now is None else now
        self.deadline = start + 60.0 * options.max_minutes if options.max_minutes else None
        self.failures: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()
        self.started: Counter[str] = Counter()
        self.deadline_hit = False

    def record(self, result: Result) -> None:
        if result.outcome.failed:
            self.failures[result.case_id] += 1

    def should_run(self, p: Planned) -> bool:
        stop_after = self.options.stop_after
        if stop_after is not None and self.failures[p.case.case_id] >= stop_after:
            self.dropped[p.case.case_id] += 1
            return False
        # past the deadline, a case that has run once stops (one run each, even when start-up ate the time)
        if self.deadline is not None and time.monotonic() >= self.deadline and self.started[p.case.case_id]:
            self.deadline_hit = True
            self.dropped[p.case.case_id] += 1
            return False
        self.started[p.case.case_id] += 1
        return True


# -- summaries ------------------------------------------------------------------

def _determinism(results: list[Result]) -> dict | None:
    """What the bitwise comparisons of a fixed-seed hunt found, or None when none ran.

    Two views: the bit patterns (a digest per buffer, recorded by every iteration that
    launched, so also when every iteration failed) and the localised comparisons with the
    baseline, the first iteration that passed its checks."""
    checked = [r for r in results if isinstance(r.metrics.get("determinism"), dict)]
    if not checked:
        return None
    patterns = Counter(tuple(sorted(r.metrics["determinism"].get("digests", {}).items())) for r in checked)
    variants, top = len(patterns), patterns.most_common(1)[0][1]
    compared = [r for r in checked if r.metrics["determinism"].get("identical") is not None
                and not r.metrics["determinism"].get("baseline")]
    differing = [r for r in compared if r.metrics["determinism"]["identical"] is False]
    base = next((r.metrics["determinism"].get("baseline_repeat") for r in compared), None)
    out = {"checked": len(checked), "compared": len(compared), "variants": variants, "most_common": top,
           "identical": variants == 1, "differing": [r.repeat for r in differing], "baseline_repeat": base}
    if len(checked) < 2:
        out["identical"] = None
        out["summary"] = "not compared: fewer than two iterations reached the checks"
        return out
    n = len(checked)
    if variants == 1:
        out["summary"] = f"bitwise identical: all {n} iterations gave the same bits in every output and cache"
        return out
    text = f"NONDETERMINISTIC: {n} iterations gave {variants} distinct bit patterns (the most common: {top} of {n})"
    if differing:
        buffers = sorted({d["name"] for r in differing for d in r.metrics["determinism"].get("differs", [])})
        within = sum(1 for r in differing if r.outcome.passed)
        text += (f"; {len(differing)} of {len(compared)} differ bitwise from iteration {base}, the first that "
                 f"passed ({', '.join(buffers)}); {within} of them still within tolerance")
        first = differing[0]
        out["first"] = {"repeat": first.repeat, "log": first.log,
                        "report": first.metrics["determinism"].get("report", "")}
    elif base is None:
        text += "; no iteration passed its checks, so none was compared element by element"
    out["summary"] = text
    return out


def summarize_case(results: list[Result], conf: float = 0.95, target_rate: float | None = None) -> dict:
    """The flake summary of one case's iterations (SKIPPED ones are not runs)."""
    ran = sorted((r for r in results if r.outcome is not Outcome.SKIPPED), key=lambda r: r.repeat)
    counts = Counter(r.label for r in ran)
    clean = sum(r.outcome is Outcome.PASS for r in ran)
    near = sum(r.outcome is Outcome.NEAR_TIE for r in ran)
    failures = [r for r in ran if r.outcome.failed]
    est = stats.estimate(len(failures), len(ran), conf)
    out = {
        "total": len(ran), "skipped": len(results) - len(ran),
        "counts": dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))),
        "clean": clean, "near_tie": near, "failures": len(failures),
        "rate": est.rate if ran else None, "conf": conf,
        "wilson": list(est.wilson), "clopper_pearson": list(est.clopper_pearson),
        "upper_one_sided": est.upper_one_sided,
        "seeds": sorted({r.seed for r in ran if r.seed is not None})[:1000],
        "devices": sorted({r.device for r in ran}),
        "by_device": {d: {"runs": sum(r.device == d for r in ran),
                          "failures": sum(r.device == d and r.outcome.failed for r in ran)}
                      for d in sorted({r.device for r in ran})},
        "first_failure": None, "determinism": _determinism(ran),
    }
    if failures:
        f = failures[0]
        out["first_failure"] = {"repeat": f.repeat, "seed": f.seed, "label": f.label, "summary": f.summary,
                                "log": f.log, "device": f.device}
    if target_rate is not None and ran and not failures:
        out["target_rate"] = target_rate
        out["more_runs_for_target"] = max(0, stats.runs_needed(target_rate, conf) - len(ran))
    return out


def summarize_hunt(results: Iterable[Result], conf: float = 0.95, target_rate: float | None = None) -> dict[str, dict]:
    by_case: dict[str, list[Result]] = {}
    for r in results:
        by_case.setdefault(r.case_id, []).append(r)
    return {case_id: summarize_case(rs, conf, target_rate) for case_id, rs in by_case.items()}


def hunt_failed(summaries: dict[str, dict], allow_nondeterministic: bool = False) -> bool:
    """A hunt fails when any iteration failed, or (unless allowed) the bits of any case varied."""
    for s in summaries.values():
        if s["failures"]:
            return True
        det = s.get("determinism")
        if det and det.get("identical") is False and not allow_nondeterministic:
            return True
    return False


# -- text -------------------------------------------------------------------------

def _pct(x: float) -> str:
    if x == 0 or x == 1:
        return f"{100 * x:.0f}%"
    return f"{100 * x:.2g}%" if x < 0.001 else f"{100 * x:.1f}%"


def iteration_line(result: Result, show_case: bool) -> str:
    """``iter 3: PASS 0.41 s`` / ``iter 4: FAIL_507018 0.12 s  <summary>``."""
    who = f"{result.case_id} " if show_case else ""
    line = f"{who}iter {result.repeat}: {result.label} {result.duration_s:.2f} s"
    det = result.metrics.get("determinism")
    if isinstance(det, dict) and det.get("identical") is False:
        names = ", ".join(d["name"] for d in det.get("differs", []))
        line += f"  [bits differ from iter {det.get('baseline_repeat')}: {names}]"
    if result.outcome.failed:
        line += f"  {result.summary}"
    return line


def outcome_phrase(s: dict) -> str:
    """``9 clean, 1 near-tie, 0 hard failures`` (+ the failures by label)."""
    hard = {k: v for k, v in s["counts"].items() if k not in (Outcome.PASS.value, Outcome.NEAR_TIE.value)}
    text = f"{s['clean']} clean, {s['near_tie']} near-tie, {s['failures']} hard failure{'s' * (s['failures'] != 1)}"
    if hard:
        text += " (" + ", ".join(f"{n} {label}" for label, n in hard.items()) + ")"
    return text


def rate_phrase(s: dict) -> str:
    n, k, conf = s["total"], s["failures"], s["conf"]
    level = f"{100 * conf:g}%"
    if n == 0:
        return "no runs: nothing can be said about the failure rate"
    if k == 0:
        text = f"0 failures in {n} runs: failure rate <= {_pct(s['upper_one_sided'])} at {level}"
        if "more_runs_for_target" in s:
            more = s["more_runs_for_target"]
            target = _pct(s["target_rate"])
            text += (f"; {more} more clean runs would bound it at {target}" if more
                     else f"; that already bounds it at {target}")
        return text
    w, cp = s["wilson"], s["clopper_pearson"]
    return (f"failure rate {_pct(s['rate'])} ({k}/{n}); {level} Wilson [{_pct(w[0])}, {_pct(w[1])}], "
            f"exact (Clopper-Pearson) [{_pct(cp[0])}, {_pct(cp[1])}]")


def summary_lines(case_id: str, s: dict) -> list[str]:
    lines = [f"{case_id}: {s['total']} runs on {', '.join(s['devices']) or '-'}"
             + (f" ({s['skipped']} skipped)" if s["skipped"] else ""),
             f"  {outcome_phrase(s)}", f"  {rate_phrase(s)}"]
    by_device = s.get("by_device") or {}
    if len(by_device) > 1:   # a flake on one device only is a hardware or placement clue
        lines.append("  per device: " + ", ".join(f"{d} {v['failures']}/{v['runs']} failed"
                                                  for d, v in by_device.items()))
    f = s.get("first_failure")
    if f:
        lines.append(f"  first failure: iter {f['repeat']} seed {f['seed']}: {f['label']}: {f['summary']}")
        if f.get("log"):
            lines.append(f"    log: {f['log']}")
    det = s.get("determinism")
    if det:
        lines.append(f"  determinism: {det['summary']}")
        first = det.get("first")
        if first and first.get("report"):
            lines.extend("    " + line for line in first["report"].splitlines()[:12])
    return lines


# -- two hunts side by side -----------------------------------------------------

def verdict(before: dict, after: dict, alpha: float = SIGNIFICANCE) -> tuple[str, float]:
    """``fixed`` / ``regressed`` / ``clean in both`` / ``no evidence either way``, and the p-value."""
    fa, na, fb, nb = before["failures"], before["total"], after["failures"], after["total"]
    if na == 0 or nb == 0:
        return "no evidence either way", 1.0
    p = stats.fisher_exact(fa, na, fb, nb)
    if fa == 0 and fb == 0:
        return "clean in both", p
    if p < alpha:
        return ("fixed" if fb / nb < fa / na else "regressed"), p
    return "no evidence either way", p


def compare_hunts(before: dict[str, dict], after: dict[str, dict], alpha: float = SIGNIFICANCE) -> list[dict]:
    """Per case in both hunts: the rates, the Fisher p-value and the verdict (cases in one only are left out)."""
    rows = []
    for case_id in sorted(set(before) & set(after)):
        a, b = before[case_id], after[case_id]
        word, p = verdict(a, b, alpha)
        rows.append({"case_id": case_id, "before": {"failures": a["failures"], "runs": a["total"], "rate": a["rate"]},
                     "after": {"failures": b["failures"], "runs": b["total"], "rate": b["rate"]},
                     "p_value": p, "verdict": word})
    return rows


def comparison_line(row: dict) -> str:
    def side(x: dict) -> str:
        rate = "-" if x["rate"] is None or (isinstance(x["rate"], float) and math.isnan(x["rate"])) else _pct(x["rate"])
        return f"{x['failures']}/{x['runs']} failed ({rate})"
    return (f"{row['case_id']}: {side(row['before'])} -> {side(row['after'])}; Fisher exact p = "
            f"{row['p_value']:.3g}: {row['verdict']}")

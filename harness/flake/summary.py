"""What a flake hunt's repeats say about one case: ``HuntSummary``.

Counts per outcome, the failure rate with its Wilson and exact intervals, the
zero-failure bound (and the clean runs still needed for a target rate), the
failures per device, the first failure with its seed and log, and the
bitwise-determinism finding of a fixed-seed hunt.  ``to_json``/``from_json``
are the shape of a ``--json`` document's ``flake`` entries and of the store
(docs/flake.md#json); renderers read that JSON or these records.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from harness import stats
from harness.commands.selection import deciding
from harness.outcomes import Outcome, Result


@dataclass(frozen=True)
class DeviceTally:
    runs: int
    failures: int

    def to_json(self) -> dict:
        return {"runs": self.runs, "failures": self.failures}


@dataclass(frozen=True)
class FirstFailure:
    repeat: int
    seed: int | None
    label: str
    summary: str
    log: str | None
    device: str

    def to_json(self) -> dict:
        return {"repeat": self.repeat, "seed": self.seed, "label": self.label, "summary": self.summary,
                "log": self.log, "device": self.device}


@dataclass(frozen=True)
class FirstDifference:
    """The first iteration whose bits differed from the baseline, with its localisation report."""

    repeat: int
    log: str | None
    report: str

    def to_json(self) -> dict:
        return {"repeat": self.repeat, "log": self.log, "report": self.report}


@dataclass(frozen=True)
class Determinism:
    """What the bitwise comparisons of a fixed-seed hunt found.

    Two views: the bit patterns (a digest per buffer, recorded by every iteration that
    launched, so also when every iteration failed) and the localised comparisons with
    the baseline, the first iteration that passed its checks.  ``identical`` is None
    when fewer than two iterations reached the checks."""

    checked: int
    compared: int
    variants: int
    most_common: int
    identical: bool | None
    differing: tuple[int, ...]
    baseline_repeat: int | None
    summary: str
    first: FirstDifference | None = None

    def to_json(self) -> dict:
        out = {"checked": self.checked, "compared": self.compared, "variants": self.variants,
               "most_common": self.most_common, "identical": self.identical, "differing": list(self.differing),
               "baseline_repeat": self.baseline_repeat, "summary": self.summary}
        if self.first is not None:
            out["first"] = self.first.to_json()
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Determinism:
        first = d.get("first")
        return cls(d["checked"], d["compared"], d["variants"], d["most_common"], d["identical"],
                   tuple(d["differing"]), d["baseline_repeat"], d["summary"],
                   FirstDifference(**first) if first else None)


@dataclass(frozen=True)
class HuntSummary:
    """The flake summary of one case's iterations (SKIPPED ones are not runs)."""

    total: int
    skipped: int
    counts: dict[str, int]             # per label, most frequent first
    clean: int
    near_tie: int
    failures: int
    rate: float | None                 # None: no runs
    conf: float
    wilson: tuple[float, float]
    clopper_pearson: tuple[float, float]
    upper_one_sided: float
    seeds: tuple[int, ...]             # the first 1000
    devices: tuple[str, ...]
    by_device: dict[str, DeviceTally]
    first_failure: FirstFailure | None
    determinism: Determinism | None    # None: no bitwise comparison ran (fresh seeds)
    target_rate: float | None = None   # set (with more_runs_for_target) after clean runs only
    more_runs_for_target: int | None = None

    @property
    def hard_failures(self) -> dict[str, int]:
        """The counts of the labels that are failures (not PASS, not NEAR_TIE)."""
        return {k: v for k, v in self.counts.items() if k not in (Outcome.PASS.value, Outcome.NEAR_TIE.value)}

    def to_json(self) -> dict:
        out = {
            "total": self.total, "skipped": self.skipped, "counts": dict(self.counts),
            "clean": self.clean, "near_tie": self.near_tie, "failures": self.failures,
            "rate": self.rate, "conf": self.conf,
            "wilson": list(self.wilson), "clopper_pearson": list(self.clopper_pearson),
            "upper_one_sided": self.upper_one_sided, "seeds": list(self.seeds), "devices": list(self.devices),
            "by_device": {d: t.to_json() for d, t in self.by_device.items()},
            "first_failure": self.first_failure.to_json() if self.first_failure else None,
            "determinism": self.determinism.to_json() if self.determinism else None,
        }
        if self.more_runs_for_target is not None:
            out["target_rate"] = self.target_rate
            out["more_runs_for_target"] = self.more_runs_for_target
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> HuntSummary:
        first, det = d.get("first_failure"), d.get("determinism")
        return cls(
            total=d["total"], skipped=d["skipped"], counts=dict(d["counts"]), clean=d["clean"],
            near_tie=d["near_tie"], failures=d["failures"], rate=d["rate"], conf=d["conf"],
            wilson=tuple(d["wilson"]), clopper_pearson=tuple(d["clopper_pearson"]),
            upper_one_sided=d["upper_one_sided"], seeds=tuple(d["seeds"]), devices=tuple(d["devices"]),
            by_device={k: DeviceTally(**v) for k, v in d["by_device"].items()},
            first_failure=FirstFailure(**first) if first else None,
            determinism=Determinism.from_json(det) if det else None,
            target_rate=d.get("target_rate"), more_runs_for_target=d.get("more_runs_for_target"))


def determinism(results: list[Result]) -> Determinism | None:
    """What the bitwise comparisons of a fixed-seed hunt found, or None when none ran."""
    checked = [r for r in results if isinstance(r.metrics.get("determinism"), dict)]
    if not checked:
        return None
    patterns = Counter(tuple(sorted(r.metrics["determinism"].get("digests", {}).items())) for r in checked)
    variants, top = len(patterns), patterns.most_common(1)[0][1]
    compared = [r for r in checked if r.metrics["determinism"].get("identical") is not None
                and not r.metrics["determinism"].get("baseline")]
    differing = [r for r in compared if r.metrics["determinism"]["identical"] is False]
    base = next((r.metrics["determinism"].get("baseline_repeat") for r in compared), None)
    n = len(checked)

    def found(identical: bool | None, summary: str, first: FirstDifference | None = None) -> Determinism:
        return Determinism(n, len(compared), variants, top, identical, tuple(r.repeat for r in differing), base,
                           summary, first)

    if n < 2:
        return found(None, "not compared: fewer than two iterations reached the checks")
    if variants == 1:
        return found(True, f"bitwise identical: all {n} iterations gave the same bits in every output and cache")
    text = f"NONDETERMINISTIC: {n} iterations gave {variants} distinct bit patterns (the most common: {top} of {n})"
    first = None
    if differing:
        buffers = sorted({d["name"] for r in differing for d in r.metrics["determinism"].get("differs", [])})
        within = sum(1 for r in differing if r.outcome.passed)
        text += (f"; {len(differing)} of {len(compared)} differ bitwise from iteration {base}, the first that "
                 f"passed ({', '.join(buffers)}); {within} of them still within tolerance")
        r = differing[0]
        first = FirstDifference(r.repeat, r.log, r.metrics["determinism"].get("report", ""))
    elif base is None:
        text += "; no iteration passed its checks, so none was compared element by element"
    return found(False, text, first)


def summarize_case(results: list[Result], conf: float = 0.95, target_rate: float | None = None) -> HuntSummary:
    """The flake summary of one case's iterations (SKIPPED ones are not runs)."""
    ran = sorted((r for r in results if r.outcome is not Outcome.SKIPPED), key=lambda r: r.repeat)
    counts = Counter(r.label for r in ran)
    failures = [r for r in ran if r.outcome.failed]
    est = stats.estimate(len(failures), len(ran), conf)
    devices = tuple(sorted({r.device for r in ran}))
    first = None
    if failures:
        f = failures[0]
        first = FirstFailure(f.repeat, f.seed, f.label, f.summary, f.log, f.device)
    more = None
    if target_rate is not None and ran and not failures:
        more = max(0, stats.runs_needed(target_rate, conf) - len(ran))
    return HuntSummary(
        total=len(ran), skipped=len(results) - len(ran),
        counts=dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))),
        clean=sum(r.outcome is Outcome.PASS for r in ran), near_tie=sum(r.outcome is Outcome.NEAR_TIE for r in ran),
        failures=len(failures), rate=est.rate if ran else None, conf=conf,
        wilson=tuple(est.wilson), clopper_pearson=tuple(est.clopper_pearson), upper_one_sided=est.upper_one_sided,
        seeds=tuple(sorted({r.seed for r in ran if r.seed is not None})[:1000]), devices=devices,
        by_device={d: DeviceTally(sum(r.device == d for r in ran), sum(r.device == d and r.outcome.failed for r in ran))
                   for d in devices},
        first_failure=first, determinism=determinism(ran),
        target_rate=target_rate if more is not None else None, more_runs_for_target=more)


def summarize_hunt(results: Iterable[Result], conf: float = 0.95,
                   target_rate: float | None = None) -> dict[str, HuntSummary]:
    """Per case id, in first-seen order; a command case with a selected set of tests (``--test``, or
    ``-k`` reaching its tests) counts by those tests, not by its own status (``deciding``)."""
    by_case: dict[str, list[Result]] = {}
    for r in deciding(results):
        by_case.setdefault(r.case_id, []).append(r)
    return {case_id: summarize_case(rs, conf, target_rate) for case_id, rs in by_case.items()}


def hunt_failed(summaries: Mapping[str, HuntSummary], allow_nondeterministic: bool = False) -> bool:
    """A hunt fails when any iteration failed, or (unless allowed) the bits of any case varied."""
    for s in summaries.values():
        if s.failures:
            return True
        if s.determinism and s.determinism.identical is False and not allow_nondeterministic:
            return True
    return False

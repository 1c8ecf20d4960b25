"""A latency compare's verdicts from its results: per case, the baseline (first ref) against every
other ref, each ref's samples kept round by round (docs/latency.md)."""
from __future__ import annotations

from harness.latency.statistics import DEFAULT_THRESHOLD, NoiseSeed, Side, against_stored, compare, compare_seeded
from harness.outcomes import Result



def undecided(cases: list, results: list[Result], ref_names: list[str], threshold: float,
              seeds: dict | None = None) -> list:
    """The cases that need another round: some candidate still UNSURE against the baseline (a case
    without samples on a side gets no verdict from more rounds, and is not run again)."""
    rows = latency_rows([r for r in results if r.case_id in {c.case_id for c in cases}], ref_names, threshold,
                        seeds)
    unsure = {row["case_id"] for row in rows if row["latency_verdict"].get("verdict") == "UNSURE"}
    return [c for c in cases if c.case_id in unsure]


def _why_none(results: list[Result], ref: str) -> str:
    """Why a ref has no samples of a case: its label or the worker's word."""
    if not results:
        return f"{ref}: did not run"
    for r in results:
        lat = r.metrics.get("latency") or {}
        if not r.outcome.passed:
            return f"{ref}: {r.label}, not timed"
        if not lat.get("measured"):
            return f"{ref}: not measured ({lat.get('why', 'no latency asked for')})"
    return f"{ref}: no samples"


def rounds_of(results: list[Result]) -> dict[int, tuple[float, ...]]:
    """One case's measured samples on one ref, by round (repeat)."""
    found = {}
    for r in results:
        lat = r.metrics.get("latency") or {}
        if r.outcome.passed and lat.get("measured") and lat.get("samples_s"):
            found[r.repeat] = tuple(lat["samples_s"])
    return found


def sides(a: list[Result], b: list[Result], names: tuple[str, str]) -> tuple[Side, Side] | None:
    """The two refs' samples in the rounds both measured (paired by round), or None when there are none."""
    ra, rb = rounds_of(a), rounds_of(b)
    common = sorted(set(ra) & set(rb))
    if not common:
        return None
    return Side(names[0], tuple(ra[i] for i in common)), Side(names[1], tuple(rb[i] for i in common))


def latency_rows(results: list[Result], ref_names: list[str], threshold: float = DEFAULT_THRESHOLD,
                 seeds: dict | None = None) -> list[dict]:
    """One row per case and candidate ref: ``{case_id, baseline, candidate, latency_verdict}``, the
    verdict a ``Comparison.to_json()`` or ``{"error": why}`` when a side has no samples.  ``seeds``
    (a latency bisect's step: case id → ``NoiseSeed.to_json()``, possibly empty) judges each case with
    the noise carried from earlier steps (``statistics.compare_seeded``), and the verdict has ``noise``."""
    by_case: dict[str, dict[str, list[Result]]] = {}
    for r in results:
        by_case.setdefault(r.case_id, {}).setdefault(r.ref or "", []).append(r)
    rows = []
    base = ref_names[0]
    for case_id, per_ref in by_case.items():
        for cand in ref_names[1:]:
            paired = sides(per_ref.get(base, []), per_ref.get(cand, []), (base, cand))
            if paired is None:
                why = "; ".join(_why_none(per_ref.get(n, []), n) for n in (base, cand) if not rounds_of(per_ref.get(n, [])))
                verdict = {"error": f"no verdict: {why or 'no round measured both'}"}
            elif seeds is None:
                verdict = compare(*paired, threshold).to_json()
            else:
                seed = NoiseSeed.from_json(seeds[case_id]) if seeds.get(case_id) else None
                judged, noise = compare_seeded(*paired, threshold, seed)
                verdict = {**judged.to_json(), "noise": noise}
            rows.append({"case_id": case_id, "baseline": base, "candidate": cand, "latency_verdict": verdict})
    return rows


def against_baseline(store, baseline_run: str, results: list[Result], threshold: float = DEFAULT_THRESHOLD) -> list[dict]:
    """This run's timed cases against stored run ``baseline_run``'s, as ``latency_rows``: each case's
    last result on each side, one run a side (``statistics.against_stored``: the two runs were not
    interleaved, so the interval is made of each run's own)."""
    before = [r for r in store.results(baseline_run) if r.case_id in {x.case_id for x in results}]
    rows = []
    for case_id in dict.fromkeys(r.case_id for r in results):
        a = [r for r in before if r.case_id == case_id]
        b = [r for r in results if r.case_id == case_id]
        row = {"case_id": case_id, "baseline": "baseline", "candidate": "this run"}
        if not a:
            rows.append({**row, "latency_verdict": {"error": f"no verdict: run {baseline_run} has no result for this case"}})
            continue
        pair = {"baseline": a[-1:], "this run": b[-1:]}
        found = {name: rounds_of(rs) for name, rs in pair.items()}
        missing = [_why_none(pair[name], name) for name, got in found.items() if not got]
        if missing:
            rows.append({**row, "latency_verdict": {"error": "no verdict: " + "; ".join(missing)}})
            continue
        sides = [Side(name, tuple(got.values())) for name, got in found.items()]
        rows.append({**row, "latency_verdict": against_stored(*sides, threshold).to_json()})
    return rows

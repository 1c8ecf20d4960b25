"""Each timed case of a --json report on one line: median, interval, samples, method, bytes, GB/s and
the fraction of the device's HBM peak (docs/latency.md).  Used by ci/device-check.sh.

    python3 ci/latency_figures.py REPORT.json
"""
from __future__ import annotations

import json
import sys


def line(result: dict) -> str:
    lat = result.get("metrics", {}).get("latency") or {}
    if not lat.get("measured"):
        return f"{result['case_id']} {result['outcome']} not timed: {lat.get('why', '-')}"
    peak = (f"{100 * lat['fraction_of_peak']:.1f}% of {lat['peak_gb_per_s']:.0f} GB/s ({lat['peak_source']})"
            if "fraction_of_peak" in lat else "peak unknown (set HARNESS_PEAK_GBPS)")
    return (f"{result['case_id']}: {lat['median_s'] * 1e6:.1f} us (95% CI {lat['ci_low_s'] * 1e6:.1f}-"
            f"{lat['ci_high_s'] * 1e6:.1f}, {lat['samples']} samples, {lat['method']}, cold {lat['cold']}) "
            f"{lat['bytes'] / 1e6:.1f} MB, {lat['gb_per_s']:.0f} GB/s, {peak}")


def main(path: str) -> None:
    for result in json.load(open(path))["results"]:
        print(line(result))


if __name__ == "__main__":
    main(sys.argv[1])

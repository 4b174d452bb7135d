"""Run the estimate model on every real logged pool with a known setup and print the error table.

Usage: python tests/bench/calibrate_estimator.py   (from the repository root; needs the real model
configs, see tests/datapaths.py)
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.datapaths import MODELS_ABSENT  # noqa: E402
from tests.estimate import calibration_cases as cc  # noqa: E402
from tests.estimate import newest_cases as nc  # noqa: E402


def main() -> int:
    if not cc.available():
        print(f"{MODELS_ABSENT}: nothing to calibrate against", file=sys.stderr)
        return 2
    outcomes = cc.run_all()
    print("| id | release | model | gpu | GPUs | logged tokens | predicted | range | error % "
          "| weights logged / predicted GiB | fit or independent | trust |")
    print("| --- | --- | --- | --- | ---: | ---: | ---: | --- | ---: | --- | --- | --- |")
    for o in outcomes:
        rng = f"{o.pool_range[0]:,}-{o.pool_range[1]:,}" if o.pool_range else "-"
        if o.case.weights_from_log:
            weights = f"{o.logged_weights_gib:.2f} (used)"
        elif o.logged_weights_gib is not None:
            weights = f"{o.logged_weights_gib:.2f} / {o.predicted_weights_gib:.2f}"
        else:
            weights = f"- / {o.predicted_weights_gib:.2f}"
        err = f"{o.error_pct:+.2f}" if o.error_pct is not None else "-"
        print(
            f"| {o.case.id} | {o.case.release} | {o.case.model} | {o.case.gpu} | {o.gpus} | {o.logged_tokens:,} "
            f"| {o.predicted_tokens:,} | {rng} | {err} | {weights} | {'independent' if o.case.independent else 'fit'} "
            f"| {o.case.trust}{'' if o.case.in_targets else ', outside the targets'} |"
        )
    for dp_id, why in cc.UNUSABLE.items():
        print(f"| {dp_id} | - | - | - | - | - | - | - | not usable: {why} | - | - | - |")
    print()
    errors = cc.target_outcomes(outcomes)
    nvidia = [abs(o.error_pct) for o in errors if o.vendor == "nvidia"]
    multi = [abs(o.error_pct) for o in errors if o.gpus > 1]
    print(f"cases in the targets: {len(errors)} ({sum(o.case.independent for o in errors)} independent, "
          f"{sum(not o.case.independent for o in errors)} fit points); outside: "
          f"{', '.join(o.case.id for o in outcomes if not o.case.in_targets) or 'none'}")
    print(f"median |error| all cases: {cc.median_abs_error(outcomes):.2f}%")
    print(f"median |error| independent cases: {cc.median_abs_error(outcomes, independent_only=True):.2f}%")
    print(f"max |error| NVIDIA cases: {max(nvidia, default=float('nan')):.2f}%")
    print(f"max |error| multi-GPU cases: {max(multi, default=float('nan')):.2f}%")
    worst = max((abs(o.error_pct) for o in errors), default=float("nan"))
    print(f"max |error|: {worst:.2f}%")
    print()
    print("| id | predicted cell B/token | logged B/token (K+V over tokens+page) | diff % |")
    print("| --- | ---: | ---: | ---: |")
    for dp_id, predicted, logged in cc.cell_checks():
        diff = 100 * (predicted - logged) / logged if logged else float("nan")
        print(f"| {dp_id} | {predicted:,.0f} | {logged:,.0f} | {diff:+.2f} |")
    print()
    print("| id (weights only) | predicted GiB | logged GiB | diff % |")
    print("| --- | ---: | ---: | ---: |")
    for dp_id, predicted, logged in cc.weight_checks():
        print(f"| {dp_id} | {predicted:.2f} | {logged:.2f} | {100 * (predicted - logged) / logged:+.2f} |")
    print()
    newest = print_newest()
    print("Setups assumed per case:")
    for o in outcomes:
        print(f"- {o.case.id}: {o.case.note}")
    for n in newest:
        print(f"- {n.case.id}: {n.case.note}")
    return 0


def print_newest() -> list:
    """The newest-family tables (tests/estimate/newest_cases.py); returns the outcomes."""
    print("Newest families, each priced as the release that printed it (tests/estimate/newest_cases.py):")
    print()
    print("| id | family | release | gpu | logged tokens | predicted | range | error % | in range "
          "| weights logged / predicted GiB | fit or independent |")
    print("| --- | --- | --- | --- | ---: | ---: | --- | ---: | --- | --- | --- |")
    newest = nc.run_all()
    for n in newest:
        weights = f"{n.logged_weights_gib:.2f} / {n.predicted_weights_gib:.2f}" if n.logged_weights_gib else "-"
        print(f"| {n.case.id} | {n.case.family} | {n.case.release} | {n.case.gpu} | {n.logged_tokens:,} "
              f"| {n.predicted_tokens:,} | {n.pool_range[0]:,}-{n.pool_range[1]:,} | {n.error_pct:+.2f} "
              f"| {'yes' if n.in_range else 'NO'} | {weights} | {'independent' if n.case.independent else 'fit'} |")
    print()
    print("| family | independent cases | median abs error % | worst abs error % |")
    print("| --- | ---: | ---: | ---: |")
    for family, (count, median, worst) in nc.by_family(newest).items():
        print(f"| {family} | {count} | {median:.2f} | {worst:.2f} |")
    print()
    print("| id (newest, cell and state) | predicted cell B/token | logged | diff % | predicted state B/slot "
          "| logged | diff % |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for c in nc.cell_checks():
        cell_diff = 100 * (c.predicted_cell - c.logged_cell) / c.logged_cell if c.logged_cell else float("nan")
        if c.logged_state and c.predicted_state:
            state = (f"{c.predicted_state:,.0f} | {c.logged_state:,.0f} "
                     f"| {100 * (c.predicted_state - c.logged_state) / c.logged_state:+.2f}")
        else:
            state = "- | - | -"
        print(f"| {c.id} | {c.predicted_cell:,.0f} | {c.logged_cell:,.0f} | {cell_diff:+.2f} | {state} |")
    print()
    return newest


if __name__ == "__main__":
    raise SystemExit(main())

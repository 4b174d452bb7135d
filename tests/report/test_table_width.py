"""The table never cuts a number (issue 21): on an 80-column terminal the README's incident example lost its
role column and printed 1,048,57; in a CI log (100 columns) a Kubernetes-length role name cut the pool range."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from kvcheck.commands.verify import VerifyOptions, verify
from kvcheck.report.formats.table import TableFormat
from tests.conftest import EXAMPLES

INCIDENT = EXAMPLES / "incident" / "manifest.yaml"


@pytest.fixture(scope="module")
def report():
    return verify(VerifyOptions(manifest=Path(INCIDENT), inputs=(str(INCIDENT),), overrides=None, mode="estimate",
                                roles=(), strict=False, timeout_s=10, logs_dir=None, gpu_check=False,
                                dummy_weights=False, launcher=None))


def figures(text: str) -> set[str]:
    return set(re.findall(r"\d[\d,]*\d(?:-\d[\d,]*\d)?", text))


@pytest.mark.parametrize("width", [100, 80, 60])
def test_every_figure_shown_is_whole(report, width: int) -> None:
    text = TableFormat(width=width).render(report)
    table = text.split("findings", 1)[0]
    assert all(len(line) <= width for line in text.splitlines())
    for figure in ("559,680", "1,745,024", "1,048,576"):  # pools and the window, whatever the width
        assert figure in table
    shown = figures(table)
    assert not any(number.endswith(",") for number in shown)
    assert "1,048,57 " not in table and "1,048,57\n" not in table


def test_narrow_terminals_leave_out_columns_visibly(report) -> None:
    assert "left out" not in TableFormat(width=100).render(report)  # the documented 100-column table is whole
    text = TableFormat(width=80).render(report)
    assert "(left out to fit 80 columns: pool range; --format json has every figure)" in text
    assert any(line.startswith("role ") for line in text.splitlines())  # the role column stays


def test_a_kubernetes_length_role_name_wraps_and_the_pool_range_stays_whole(report) -> None:
    long = "sglang-glm-5-2-fp8-prefill-leaderworkerset-0-us-east1-b"
    renamed = dataclasses.replace(report, roles=tuple(dataclasses.replace(r, name=f"{long}-{r.name}")
                                                      for r in report.roles))
    text = TableFormat(width=100).render(renamed)
    table = text.split("findings", 1)[0]
    assert all(len(line) <= 100 for line in text.splitlines())
    # the names fold (the first 31 characters on their row), only the pool range is left out, every figure whole
    assert "\nsglang-glm-5-2-fp8-prefill-lead   FAIL         559,680   1,048,576      53.4%     559,674   estimate\n" \
        in table
    assert "1,745,024" in table and "1,048,570" in table
    assert "(left out to fit 100 columns: pool range; --format json has every figure)" in table

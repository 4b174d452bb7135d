"""Impossible pool figures in logs: a forged or damaged figure is "could not check" (KV309, exit 3) in
every format, never a pass, a wrong reading (`1e400` as 1) or a crash (a 5,000-digit figure)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import REPO_ROOT
from tests.security.helpers import PEAK_MIB_LIMIT, attack

LOG = REPO_ROOT / "tests" / "data" / "logs" / "sglang-qwen35-9b-2x4090-tp2.log"  # pool 327,310 on lines 22, 24, 31
FORMATS = ("json", "junit", "github", "table", "markdown")

FORGED = {
    "10^20": ("99999999999999999999", "line 22: 99999999999999999999 is not a token count"),
    "1e400": ("1e400", "line 22: 1e... is not a token count"),
    "5000 digits": ("9" * 5000, "line 22: 999999999999... (5000 digits) is not a token count"),
    "2^62": (str(2**62), f"line 22: {2**62} is not a token count"),
    "2^31": (str(2**31), "line 22: 2147483648 is not a token count"),
    "fraction": ("327310.5", "line 22: 327310.... is not a token count"),
}


@pytest.mark.parametrize(("figure", "message"), FORGED.values(), ids=FORGED.keys())
def test_an_impossible_log_figure_is_could_not_check_in_every_format(tmp_path, figure, message):
    forged = tmp_path / "server.log"
    forged.write_text(LOG.read_text().replace("327310", figure))
    for fmt in FORMATS:
        out = attack("logs", str(forged), "--format", fmt, timeout=60, process=True)
        assert out.exit_code == 3, (fmt, out.stderr)
        assert "KV309" in out.stdout, fmt
        assert out.peak_mib < PEAK_MIB_LIMIT
    report = json.loads(attack("logs", str(forged), "--format", "json").stdout)
    [role] = report["roles"]
    assert (role["status"], role["pool_tokens"]) == ("error", None)
    [kv309] = [f for f in report["findings"] if f["rule"] == "KV309"]
    assert kv309["message"].startswith(f"the log's pool figures cannot be trusted: {message} a server can hold "
                                       "(0 to 2,147,483,647)")


def test_the_largest_figure_a_server_can_hold_is_judged(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(LOG.read_text().replace("327310", str(2**31 - 1)))
    report = json.loads(attack("logs", str(log), "--format", "json").stdout)
    assert [(r["status"], r["pool_tokens"]) for r in report["roles"]] == [("pass", 2**31 - 1)]

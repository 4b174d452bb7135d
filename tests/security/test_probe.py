"""The probe against hostile front doors: claims of huge windows, a byte budget, an echoed token."""

from __future__ import annotations

import json
import socket

from tests.probe.deployment import Deployment
from tests.security.helpers import PEAK_MIB_LIMIT, RawServer, attack

TOKEN = "sk-probe-attack-0123456789abcdef"


def test_a_server_claiming_20m_tokens_gets_prompts_no_longer_than_the_promised_window():
    with Deployment("fixed", context_len=20_000_000, pool_tokens=20_000_000) as front:
        out = attack("probe", front.url, "--context-length", "4096", "--tenants", "0", "--format", "json",
                     timeout=120, process=True)
        longest = max(s.prompt_tokens or 0 for s in front.seen)
    assert longest <= 4096 + 1  # W + 1: the probe's beyond-window check
    # the double admits what the window refuses: the probe reports it, from prompts of the window's size
    assert out.exit_code == 1, out.stderr
    report = json.loads(out.stdout)
    assert {f["rule"] for f in report["findings"]} >= {"KV401"}
    assert out.peak_mib < PEAK_MIB_LIMIT


def test_a_claimed_window_beyond_the_hard_limit_is_not_probed():
    with Deployment("fixed", context_len=20_000_000, pool_tokens=20_000_000) as front:
        out = attack("probe", front.url, "--format", "json", timeout=120, process=True)
        posts = [s for s in front.seen if s.method == "POST"]
    assert out.exit_code == 3, out.stderr
    assert posts == []
    assert "the window to probe is 20,000,000 tokens" in out.stdout
    assert out.peak_mib < PEAK_MIB_LIMIT


def test_the_byte_budget_stops_sending(tmp_path):
    with Deployment("fixed", context_len=1_000_000, pool_tokens=1_000_000) as front:
        out = attack("probe", front.url, "--max-upload-mib", "8", "--tenants", "0", "--format", "json",
                     timeout=120, process=True)
        sent = sum(s.prompt_tokens or 0 for s in front.seen)
    assert out.exit_code == 3, out.stderr
    assert "--max-upload-mib (8) reached" in out.stdout
    assert sent * 5 < 8 * 2**20  # token ids of 4 to 6 digits: about 5 bytes each
    assert out.peak_mib < PEAK_MIB_LIMIT


def test_a_token_the_front_door_echoes_never_reaches_the_report():
    def echo(conn: socket.socket, request: bytes) -> None:
        auth = next(line for line in request.split(b"\r\n") if line.lower().startswith(b"authorization:"))
        body = json.dumps({"error": {"message": f"rejected {auth.decode()}"}, "echo": auth.decode()}).encode()
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: "
                     + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n" + body)

    with RawServer({"/server_info": echo, "/generate": echo, "/v1/models": echo, "/v1/completions": echo}) as front:
        for fmt in ("json", "table", "markdown", "junit", "github"):
            out = attack("probe", front.url, "--context-length", "4096", "--pool", "8192", "--tenants", "0",
                         "--token-env", "KVCHECK_PROBE_TOKEN", "--format", fmt, "--rate", "50",
                         env={"KVCHECK_PROBE_TOKEN": TOKEN}, timeout=120)
            assert out.exit_code in (1, 3), (fmt, out.stderr)
            assert TOKEN not in out.stdout + out.stderr, fmt


class _PaddedDeployment(Deployment):
    """The fixed deployment, every generation answer padded to 16 MiB (under the 32 MiB answer cap)."""

    PAD = "A" * (16 * 2**20)

    def generate(self, prompt, max_new_tokens):
        status, payload, how = super().generate(prompt, max_new_tokens)
        return status, {**payload, "pad": self.PAD}, how


def test_large_answers_are_not_held_after_they_are_judged():
    # every answer's whole text was kept in the results to the end: 32 answers of 16 MiB held ~600 MiB
    with _PaddedDeployment("fixed") as front:
        out = attack("probe", front.url, "--concurrency", "1", "--rate", "1000", "--seed", "5", "--format", "json",
                     timeout=300, process=True)
    assert out.exit_code == 0, out.stderr
    report = json.loads(out.stdout)
    assert (report["verdict"], len([r for role in report["roles"] for r in (role["details"].get("requests") or [])])) \
        == ("pass", 32)
    assert out.peak_mib < 2 * PEAK_MIB_LIMIT, out.peak_mib

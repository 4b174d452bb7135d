"""A real SGLang 0.5.23 decode role on CPU: it admits a prompt only while the prompt plus its
reservation (--num-reserved-decode-tokens, 512) fits the pool, and a longer one waits with no error.
kvcheck's admission bound for the role (audit, logs, verify) is that real bound, and KV107 fails a
decode pool that holds the window but not the window's longest prompt plus the reservation.

The decode role runs with the `fake` transfer backend (decode accepts it, prefill does not): the
request is sent to decode directly, as a prefill would hand it over, and its KV "arrives" at once.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, run_kvcheck
from tests.engines.real.conftest import RealSglang, Server, running_server, verify

pytestmark = [pytest.mark.real_engine, pytest.mark.slow]

WINDOW = 2048
POOL = 2048
RESERVED = 512  # SGLang's default --num-reserved-decode-tokens
BOUND = POOL - RESERVED + 1  # prompts of this many tokens or more wait at decode
DECODE_ARGS = ("--disaggregation-mode", "decode", "--disaggregation-transfer-backend", "fake",
               "--disaggregation-decode-retraction-backup", "cpu_tensor")
FAKE_BOOTSTRAP_HOST = "2.2.2.2"  # sglang.srt.disaggregation.utils: what the fake backend expects


@pytest.fixture(scope="module")
def decode(real_sglang: RealSglang, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("decode") / "server.log"
    with running_server(real_sglang, log, *DECODE_ARGS, "--context-length", str(WINDOW),
                        "--max-total-tokens", str(POOL)) as srv:
        yield srv


def generate(server: Server, prompt_tokens: int, timeout_s: float) -> int | None:
    """POST /generate with a prompt of that many token ids (all inside the tiny model's vocabulary);
    the HTTP status, or None when no answer came within timeout_s."""
    body = {
        "bootstrap_host": FAKE_BOOTSTRAP_HOST,
        "bootstrap_room": prompt_tokens,
        "input_ids": [100 + i % 4000 for i in range(prompt_tokens)],
        "sampling_params": {"max_new_tokens": 1, "temperature": 0},
    }
    request = urllib.request.Request(server.url + "/generate", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except TimeoutError:
        return None


def cli_json(*args: str) -> tuple[int, dict, str]:
    done = run_kvcheck(*args, "--format", "json", cwd=REPO_ROOT, timeout=600)
    assert done.stdout, done.stderr
    return done.exit_code, json.loads(done.stdout), done.stderr


def test_a_real_decode_role_serves_pool_less_reserved_and_leaves_one_more_token_waiting(decode: Server) -> None:
    assert generate(decode, BOUND - 1, timeout_s=120) == 200
    # one token more fits the pool (and max_req_input_len, 2,042) but not with the reservation: no
    # refusal, no error, no answer; the engine only drops it when the client goes away
    assert generate(decode, BOUND, timeout_s=20) is None
    assert generate(decode, BOUND - 1, timeout_s=120) == 200  # the role still serves what fits


def test_audit_of_the_real_decode_role_uses_its_real_bound_and_fails_kv107(decode: Server) -> None:
    code, report, stderr = cli_json("audit", decode.url)
    assert code == 1, (report, stderr)
    [role] = report["roles"]
    assert (role["status"], role["pool_tokens"], role["max_input_tokens"]) == ("fail", POOL, BOUND), role
    kv107 = [f for f in report["findings"] if f["rule"] == "KV107"]
    assert [(f["severity"], f["role"]) for f in kv107] == [("error", role["name"])], report["findings"]
    assert f"admits prompts only below {BOUND:,} tokens" in kv107[0]["message"]
    assert f"reserves {RESERVED} tokens per request" in kv107[0]["message"]


def test_logs_of_the_real_decode_role_use_its_real_bound(decode: Server) -> None:
    code, report, stderr = cli_json("logs", str(decode.log), "--context-length", str(WINDOW))
    assert code == 1, (report, stderr)
    [role] = report["roles"]
    assert (role["pool_tokens"], role["max_input_tokens"]) == (POOL, BOUND), role
    assert "KV107" in [f["rule"] for f in report["findings"]], report["findings"]


def test_verify_of_a_real_decode_role_one_token_short_of_the_reservation_is_exit_1_kv107(
    real_sglang: RealSglang, tmp_path: Path
) -> None:
    # W - 7 + 512 = 2,553 tokens admit the window's longest prompt; 2,552 leave it waiting
    pool = WINDOW - 7 + RESERVED - 1
    done = verify(real_sglang, tmp_path, pool, **{"disaggregation-mode": "decode",
                                                  "disaggregation-transfer-backend": "fake",
                                                  "disaggregation-decode-retraction-backup": "cpu_tensor"})
    assert done.code == 1, (done.report, done.stderr[-3000:])
    [role] = done.report["roles"]
    assert (role["status"], role["pool_tokens"], role["max_input_tokens"]) == ("fail", pool, pool - RESERVED + 1), role
    errors = [(f["rule"], f["role"]) for f in done.report["findings"] if f["severity"] == "error"]
    assert errors == [("KV107", "server")], done.report["findings"]

"""`kvcheck logs` on a real SGLang 0.5.23 decode role's log (tests/data/README.md): the role's admission
bound is its pool less the 512 tokens it reserves per request, and a window its pool holds but not
with the reservation fails KV107."""

from __future__ import annotations

import json

from tests.conftest import REPO_ROOT, run_kvcheck

LOG = REPO_ROOT / "tests" / "data" / "real-engines" / "sglang-0.5.23-cpu-decode-pool2048.log"


def logs(window: int) -> tuple[int, dict]:
    done = run_kvcheck("logs", str(LOG), "--context-length", str(window), "--format", "json")
    assert done.stdout, done.stderr
    return done.exit_code, json.loads(done.stdout)


def test_the_real_decode_log_is_judged_on_pool_less_reserved() -> None:
    code, report = logs(2048)
    assert code == 1
    [role] = report["roles"]
    assert (role["pool_tokens"], role["max_input_tokens"], role["details"]["engine_context_len"]) == (2048, 1537, 4096)
    assert [(f["rule"], f["severity"]) for f in report["findings"]] == [("KV107", "error"), ("KV203", "warning")]
    # the rank keeps SGLang's own figure, which a decode role does not honour
    assert role["details"]["ranks"][0]["max_req_input_len"] == 2042


def test_a_window_whose_longest_prompt_fits_with_the_reservation_passes() -> None:
    # W - 7 + 512 <= 2,048 for W = 1,543
    code, report = logs(1543)
    assert code == 0, report["findings"]
    assert [f["rule"] for f in report["findings"]] == ["KV203"]
    code, report = logs(1544)
    assert code == 1 and [f["rule"] for f in report["findings"]] == ["KV107", "KV203"]

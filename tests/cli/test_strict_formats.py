"""--strict in every format: a warning that fails the run fails it in each format's own terms.

A cross-role warning (KV104, no role) fails a --strict run (exit 1, JSON verdict fail), but the JUnit
`deployment` case was judged without --strict: the suite read tests="3" failures="0", all green.
"""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

from tests.conftest import EXAMPLES, run_kvcheck

MANIFEST = """\
context_length: 131072
model: {path: meta-llama/Llama-3.1-8B-Instruct, config: llama-3.1-8b-instruct.config.json}
engine: {version: "0.5.23"}
gpu: H100
args: {disaggregation-enable-kv-checksum: true}
roles:
  prefill: {gpus: [0], args: {disaggregation-mode: prefill}}
  decode: {gpus: [1], args: {disaggregation-mode: decode, mem-fraction-static: 0.40, num-reserved-decode-tokens: 4000}}
policy: {ignore: [KV107]}
"""


def test_a_cross_role_warning_fails_the_junit_suite_under_strict(tmp_path: Path) -> None:
    shutil.copy(EXAMPLES / "single-server" / "llama-3.1-8b-instruct.config.json", tmp_path)
    (tmp_path / "m.yaml").write_text(MANIFEST)
    done = run_kvcheck("verify", "m.yaml", "--mode", "estimate", "--strict", "--format", "json",
                       "--report", "junit=r.xml", cwd=tmp_path)
    report = json.loads(done.stdout)
    assert (done.exit_code, report["verdict"], [(f["rule"], f["role"]) for f in report["findings"]]) == (
        1, "fail", [("KV104", None)])
    suite = ET.parse(tmp_path / "r.xml").getroot()
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("3", "1", "0")
    [failed] = [case for case in suite.iter("testcase") if case.find("failure") is not None]
    assert (failed.get("name"), failed.find("failure").get("type")) == ("deployment", "KV104")

    done = run_kvcheck("verify", "m.yaml", "--mode", "estimate", "--format", "junit", cwd=tmp_path)
    suite = ET.fromstring(done.stdout.split("\n", 1)[1])
    assert (done.exit_code, suite.get("failures"), suite.get("errors")) == (0, "0", "0")

"""DisaggregatedSet's current API (kubernetes-sigs/lws `disaggregatedset.x-k8s.io/v1`): roles[].spec holds
LWS's template spec, and `slices` copies every role; the project's own sample is read as it is written."""

from __future__ import annotations

import json
from pathlib import Path

from kvcheck.inputs.deploy.formats import FORMATS
from kvcheck.inputs.deploy.formats.disaggregated_set import read_disaggregated_set
from kvcheck.inputs.deploy.source import SourceFile, parse_documents
from tests.conftest import REPO_ROOT, run_kvcheck

SAMPLE = "tests/data/operators/lws-disaggregatedset_v1_disaggregatedset.yaml"  # lws config/samples, byte for byte
FIX = "tests/inputs/deploy/fixtures/disaggregatedset-v1-role-spec.yaml"


def _sglang_sample(tmp_path: Path) -> Path:
    """The upstream sample with its nginx containers swapped for SGLang servers, nothing else changed."""
    text = (REPO_ROOT / SAMPLE).read_text(encoding="utf-8")
    for mode in ("prefill", "decode"):
        text = text.replace(
            f"                role: {mode}\n            spec:\n              containers:\n"
            "                - name: worker\n                  image: nginx:latest\n",
            f"                role: {mode}\n            spec:\n              containers:\n"
            "                - name: worker\n                  image: lmsysorg/sglang:v0.5.23\n"
            '                  command: ["python3", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3-8B",'
            f' "--disaggregation-mode", "{mode}", "--context-length", "32768"]\n')
    path = tmp_path / "ds.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_the_upstream_sample_with_sglang_servers_is_read_role_by_role(tmp_path: Path) -> None:
    path = _sglang_sample(tmp_path)
    done = run_kvcheck("import", str(path), "--format", "json")
    assert done.exit_code == 0, done.stderr
    assert json.loads(done.stdout) == {
        "name": "disaggregatedset-sample", "context_length": 32768, "model": {"path": "Qwen/Qwen3-8B"},
        "engine": {"version": "0.5.23"},
        "roles": {
            "prefill": {"args": {"disaggregation-mode": "prefill", "context-length": 32768}},
            "decode": {"args": {"disaggregation-mode": "decode", "context-length": 32768}},
        },
    }
    lines = run_kvcheck("import", str(path)).stdout.splitlines()
    assert f"  prefill:  # {path}:27:19 (DisaggregatedSet)" in lines  # the leader template's container, in roles[0].spec


def test_the_upstream_sample_as_written_runs_no_sglang_server() -> None:
    # nginx containers: a kind kvcheck reads, with nothing to check (exit 2, as for any such input)
    done = run_kvcheck("import", SAMPLE)
    assert done.exit_code == 2
    assert done.stderr.startswith(f"kvcheck: error: {SAMPLE}: no engine server (SGLang, vLLM) in a supported kind; the input "
                                  f"holds: DisaggregatedSet (disaggregatedset.x-k8s.io/v1) at {SAMPLE}:1\n")


def test_replicas_are_per_slice_times_slices() -> None:
    [doc] = parse_documents(SourceFile(FIX, (REPO_ROOT / FIX).read_text(encoding="utf-8")))
    roles = read_disaggregated_set(doc, FORMATS.gather([doc]))
    got = {r.name: (r.replicas.value, r.replicas.origin) for r in roles if r.replicas is not None}
    assert got == {"prefill": (4, "role replicas x 2 slices"), "decode": (2, "role replicas x 2 slices")}

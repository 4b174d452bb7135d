"""roles.N.side: the prefill/decode side of a role whose engine arguments cannot state it (a Dynamo vLLM worker)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import REPO_ROOT, run_kvcheck

QWEN06 = REPO_ROOT / "tests" / "data" / "models" / "Qwen--Qwen3-0.6B.json"


def _manifest(tmp_path: Path, prefill: str, decode: str, engine: str = "vllm") -> Path:
    (tmp_path / "config.json").write_text(QWEN06.read_text())
    path = tmp_path / "pd.yaml"
    version = "0.32.0" if engine == "vllm" else "0.5.23"
    role = lambda text: "\n".join("    " + line for line in text.splitlines())  # noqa: E731
    path.write_text(
        "name: pd pair\n"
        "context_length: 16000\n"
        "model: {path: Qwen/Qwen3-0.6B, config: config.json}\n"
        f"engine: {{name: {engine}, version: \"{version}\"}}\n"
        "gpu: H100\n"
        "roles:\n"
        f"  prefill:\n{role(prefill)}\n"
        f"  decode:\n{role(decode)}\n"
    )
    return path


def test_side_puts_two_vllm_roles_into_a_pair_that_the_pair_rules_judge(tmp_path: Path) -> None:
    path = _manifest(tmp_path, "side: prefill\nargs: {max-model-len: 16384}",
                     "side: decode\nargs: {max-model-len: 32768}")
    result = run_kvcheck("verify", str(path), "--mode", "estimate", "--format", "json")
    assert result.exit_code == 1, result.stderr
    # the context lengths differ (KV110), and so do the prompt lengths each admits (KV104)
    assert sorted(f["rule"] for f in json.loads(result.stdout)["findings"]) == ["KV104", "KV110"]
    # without the sides the two are unrelated servers, each passing alone
    plain = _manifest(tmp_path, "args: {max-model-len: 16384}", "args: {max-model-len: 32768}")
    assert run_kvcheck("verify", str(plain), "--mode", "estimate").exit_code == 0


def test_a_side_the_engine_arguments_contradict_is_exit_2_at_its_line(tmp_path: Path) -> None:
    consumer = '{"kv_connector": "NixlConnector", "kv_role": "kv_consumer"}'
    path = _manifest(tmp_path, "side: prefill\nargs: {max-model-len: 16384}",
                     f"side: prefill\nargs: {{max-model-len: 16384, kv-transfer-config: '{consumer}'}}")
    result = run_kvcheck("verify", str(path), "--mode", "estimate")
    assert result.exit_code == 2
    assert f"{path}:11:11: roles.decode.side: 'prefill', but the role's vLLM arguments make it a decode role" \
        in result.stderr


def test_sglang_states_the_side_in_its_own_flag(tmp_path: Path) -> None:
    path = _manifest(tmp_path, "side: prefill\nargs: {}", "args: {}", engine="sglang")
    result = run_kvcheck("verify", str(path), "--mode", "estimate")
    assert result.exit_code == 2
    assert "roles.prefill.side: SGLang states a role's side with --disaggregation-mode; set " \
           "disaggregation-mode: prefill in the role's args instead" in result.stderr


def test_an_unknown_side_is_exit_2(tmp_path: Path) -> None:
    path = _manifest(tmp_path, "side: both\nargs: {}", "args: {}")
    result = run_kvcheck("verify", str(path), "--mode", "estimate")
    assert result.exit_code == 2
    assert "roles.prefill.side" in result.stderr

"""CPU roles are a deployment, not a test trick (issue 19): a manifest says `device: cpu`.

Such a role lists no GPUs, gets no NVML pre-flight and no CUDA_VISIBLE_DEVICES, and needs no
--no-gpu-check; the host's memory and NUMA nodes are checked instead (KV324) and recorded in the
report. SGLang is given `--device cpu`; an SGLang `--device cpu` in the args alone means the same. The
estimate says plainly that it cannot size a CPU pool (it depends on the RAM free at boot), while a
--max-total-tokens cap below the window still fails the gate for certain (KV103).
"""

from __future__ import annotations

import json
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kvcheck.backends.measure.launchers.base import Refusal
from kvcheck.backends.measure.launchers.command import build_env, on_cpu
from kvcheck.backends.measure.launchers.local import LocalLauncher
from kvcheck.engines import get_engine
from kvcheck.hostmem import HostMemory, NumaNode
from kvcheck.model import RoleTarget
from tests.conftest import EXAMPLES, run_kvcheck
from tests.measure.conftest import FAKE_SGLANG, make_target

LLAMA = EXAMPLES / "single-server" / "llama-3.1-8b-instruct.config.json"
MANIFEST = """\
name: cpu server
context_length: 8192
model: {{path: meta-llama/Llama-3.1-8B-Instruct, config: {config}}}
engine:
  version: "0.5.23"
  command: [{python}, {engine}]
  env: {{SGLANG_USE_CPU_ENGINE: "1"{env}}}
{device}args: {{attention-backend: torch_native, max-total-tokens: {cap}, context-length: 8192{args}}}
roles:
  server: {{{role}}}
"""
HOST_KEYS = {"mem_total_gib", "mem_available_gib", "cgroup_limit_gib", "numa_nodes", "mem_available_per_node_gib"}


def manifest(tmp_path: Path, *, cap: int = 16384, role: str = "", device: str = "device: cpu\n", args: str = "",
             env: str = "") -> Path:
    path = tmp_path / "cpu.yaml"
    path.write_text(MANIFEST.format(config=json.dumps(str(LLAMA)), python=json.dumps(sys.executable),
                                    engine=json.dumps(str(FAKE_SGLANG)), cap=cap, role=role, device=device,
                                    args=args, env=env), encoding="utf-8")
    return path


def measured(tmp_path: Path, path: Path) -> tuple[int, dict, dict]:
    envfile = tmp_path / "env.json"
    result = run_kvcheck("verify", str(path), "--format", "json",
                         env={"FAKE_SGLANG_ENVFILE": str(envfile), "FAKE_SGLANG_MODEL_CONTEXT": "8192"})
    seen = json.loads(envfile.read_text(encoding="utf-8")) if envfile.exists() else {}
    return result.exit_code, json.loads(result.stdout), seen


@pytest.mark.slow
def test_a_cpu_manifest_is_measured_without_gpus_nvml_or_cuda_settings(tmp_path: Path) -> None:
    code, report, seen = measured(tmp_path, manifest(tmp_path))
    assert code == 0, report  # no --no-gpu-check on a host without NVML
    (role,) = report["roles"]
    assert (role["status"], role["pool_tokens"], role["gpus"]) == ("pass", 16384, None)
    assert role["details"]["engine_env"] == {"SGLANG_USE_CPU_ENGINE": "1"}  # no CUDA_VISIBLE_DEVICES
    assert set(role["details"]["host"]) == HOST_KEYS
    assert role["details"]["host"]["numa_nodes"] >= 1
    assert not any(name.startswith("CUDA_") for name in seen["env"])
    # the manifest's device is SGLang's --device cpu, given once, before where to listen
    assert seen["argv"].count("--device") == 1
    assert seen["argv"][seen["argv"].index("--device") + 1] == "cpu"
    assert seen["argv"].index("--device") < seen["argv"].index("--host")
    assert role["argv"][role["argv"].index("--device") + 1] == "cpu"


@pytest.mark.slow
def test_sglang_device_cpu_in_the_args_alone_makes_a_cpu_role(tmp_path: Path) -> None:
    code, report, seen = measured(tmp_path, manifest(tmp_path, device="", args=", device: cpu"))
    assert code == 0, report
    assert report["roles"][0]["details"]["engine_env"] == {"SGLANG_USE_CPU_ENGINE": "1"}
    assert seen["argv"].count("--device") == 1  # the args' own flag, not a second one


@pytest.mark.slow
def test_a_role_overrides_the_top_level_device(tmp_path: Path) -> None:
    path = manifest(tmp_path, device="device: gpu\n", role="device: cpu")
    code, report, seen = measured(tmp_path, path)
    assert code == 0, report
    assert seen["argv"][seen["argv"].index("--device") + 1] == "cpu"


def test_a_cpu_role_takes_no_gpu_list(tmp_path: Path) -> None:
    result = run_kvcheck("verify", str(manifest(tmp_path, role="gpus: [0]")), "--mode", "estimate")
    assert result.exit_code == 2
    assert f"{tmp_path / 'cpu.yaml'}:11:18: roles.server.gpus: the role runs on the CPU (device: cpu): it takes " \
           "no GPU list; remove gpus" in result.stderr


def test_a_device_the_args_contradict_is_an_input_error(tmp_path: Path) -> None:
    result = run_kvcheck("verify", str(manifest(tmp_path, device="device: gpu\n", args=", device: cpu")))
    assert result.exit_code == 2
    assert f"{tmp_path / 'cpu.yaml'}:8:9: device: device gpu for role server, but its args select --device cpu: " \
           "say the device once" in result.stderr
    result = run_kvcheck("verify", str(manifest(tmp_path, args=", device: cuda")))
    assert result.exit_code == 2
    assert "device: device cpu for role server, but its args select --device cuda" in result.stderr


def test_an_unknown_device_is_an_input_error(tmp_path: Path) -> None:
    result = run_kvcheck("verify", str(manifest(tmp_path, device="device: tpu\n")))
    assert result.exit_code == 2
    assert f"{tmp_path / 'cpu.yaml'}:8:9: device: Input should be 'gpu', 'cuda' or 'cpu' (got 'tpu')" in result.stderr


def test_more_sglang_ranks_than_numa_nodes_are_refused_before_boot(tmp_path: Path) -> None:
    # 2048 ranks: more than any host's NUMA nodes (at most 1024 are read), so no engine starts
    envfile = tmp_path / "env.json"
    result = run_kvcheck("verify", str(manifest(tmp_path, args=", tp-size: 2048")), "--format", "json",
                         env={"FAKE_SGLANG_ENVFILE": str(envfile)})
    assert result.exit_code == 3, result.stdout + result.stderr
    (finding,) = json.loads(result.stdout)["findings"]
    assert finding["rule"] == "KV324"
    assert "runs 2048 SGLang CPU ranks (dp x tp x pp), and this host has" in finding["message"]
    assert "SGLANG_CPU_OMP_THREADS_BIND" in finding["hint"]
    assert not envfile.exists()  # refused before the engine started


def test_a_bind_list_shorter_than_the_ranks_is_refused(tmp_path: Path) -> None:
    path = manifest(tmp_path, args=", tp-size: 4", env=', SGLANG_CPU_OMP_THREADS_BIND: "0|1"')
    result = run_kvcheck("verify", str(path), "--format", "json")
    assert result.exit_code == 3
    (finding,) = json.loads(result.stdout)["findings"]
    assert (finding["rule"], finding["message"]) == (
        "KV324", "role server runs 4 SGLang CPU ranks, and SGLANG_CPU_OMP_THREADS_BIND=0|1 names 2 CPU group(s): "
        "SGLang needs one per rank and stops at start")


def test_the_estimate_says_it_cannot_size_a_cpu_pool(tmp_path: Path) -> None:
    result = run_kvcheck("verify", str(manifest(tmp_path)), "--mode", "estimate", "--format", "json")
    assert result.exit_code == 3
    (finding,) = json.loads(result.stdout)["findings"]
    assert finding["rule"] == "KV305"
    assert "runs on the CPU (device: cpu): SGLang sizes a CPU pool at boot from the RAM free on each NUMA " \
           "node times mem-fraction-static" in finding["message"]
    assert "the pool is at most --max-total-tokens 16,384" in finding["message"]


def test_a_cap_below_the_window_fails_a_cpu_role_for_certain(tmp_path: Path) -> None:
    result = run_kvcheck("verify", str(manifest(tmp_path, cap=4096)), "--mode", "estimate", "--format", "json")
    assert result.exit_code == 1
    assert [f["rule"] for f in json.loads(result.stdout)["findings"]] == ["KV305", "KV103"]


# -- the seam and the pre-flight, without a CLI run ---------------------------------------------------------------


def host(available: int | None, nodes: int = 1) -> HostMemory:
    return HostMemory(64 * 2**30, available, None,
                      tuple(NumaNode(i, 8, 32 * 2**30, 16 * 2**30) for i in range(nodes)),
                      () if available is not None else ("/proc/meminfo is not readable",))


def cpu_target(**kwargs: Any) -> RoleTarget:
    return replace(make_target("server", gpus=(), **kwargs), device="cpu")


def preflight(launcher: LocalLauncher, target: RoleTarget) -> Refusal | None:
    return launcher.preflight(target, settle=False, cancel=threading.Event(), on_phase=lambda _: None)


def test_the_device_comes_from_the_manifest_then_the_args_then_gpus() -> None:
    sglang, vllm = get_engine("sglang"), get_engine("vllm")
    assert sglang.device(make_target(args={"device": "cpu"})) == "cpu"
    assert sglang.device(make_target()) == "cuda"
    assert sglang.device(cpu_target()) == "cpu"
    vllm_role = make_target()
    assert vllm.device(vllm_role) == "cuda"
    assert vllm.device(replace(vllm_role, engine="vllm", device="cpu")) == "cpu"  # vLLM 0.32 has no --device


def test_a_cpu_role_gets_no_cuda_settings_and_a_gpu_role_does() -> None:
    target = cpu_target()
    assert on_cpu(target)
    env = build_env(target, {"PATH": "/bin"})
    assert env == {"PATH": "/bin"}
    assert build_env(make_target(gpus=(2, 3)), {})["CUDA_VISIBLE_DEVICES"] == "2,3"


def test_unreadable_host_memory_is_refused_as_not_checked() -> None:
    launcher = LocalLauncher(nvml=object(), host_reader=lambda: host(None))
    refusal = preflight(launcher, cpu_target())
    assert refusal is not None
    (found,) = refusal.findings
    assert (found.rule, found.severity) == ("KV324", "error")
    assert found.message == ("role server runs on the CPU, and this host's available memory cannot be read "
                             "(/proc/meminfo is not readable): SGLang sizes a CPU role's pool from it")
    assert refusal.details["host"]["mem_available_gib"] is None


def test_a_host_with_no_memory_available_is_refused() -> None:
    refusal = preflight(LocalLauncher(host_reader=lambda: host(0)), cpu_target())
    assert refusal is not None and refusal.findings[0].rule == "KV324"
    assert "has no memory available" in refusal.findings[0].message


def test_a_host_that_holds_the_role_goes_ahead_without_nvml() -> None:
    # nvml=None and no NVML library here: a CPU role never opens the GPU inventory
    launcher = LocalLauncher(host_reader=lambda: host(8 * 2**30, nodes=2))
    assert preflight(launcher, cpu_target(args={"tp_size": 2})) is None
    assert launcher._inventory is None
    refusal = preflight(launcher, cpu_target(args={"tp_size": 3}))
    assert refusal is not None
    assert refusal.findings[0].message.startswith(
        "role server runs 3 SGLang CPU ranks (dp x tp x pp), and this host has 2 NUMA node(s) with CPUs")
    # attention DP runs inside the TP group: it adds no rank; DP replicas do
    assert preflight(launcher, cpu_target(args={"tp_size": 2, "dp_size": 2, "enable_dp_attention": True})) is None
    assert preflight(launcher, cpu_target(args={"tp_size": 2, "dp_size": 2})) is not None


def test_the_bind_variable_is_read_as_sglang_reads_it(monkeypatch) -> None:
    # environ.py copies SGL_CPU_OMP_THREADS_BIND over SGLANG_CPU_OMP_THREADS_BIND (0.5.3 on): one group, two ranks
    monkeypatch.delenv("SGLANG_CPU_OMP_THREADS_BIND", raising=False)
    monkeypatch.delenv("SGL_CPU_OMP_THREADS_BIND", raising=False)
    launcher = LocalLauncher(host_reader=lambda: host(8 * 2**30, nodes=1))
    two = cpu_target(args={"tp_size": 2})
    legacy = replace(two, env={"SGLANG_CPU_OMP_THREADS_BIND": "0-3|4-7", "SGL_CPU_OMP_THREADS_BIND": "0-7"})
    refusal = preflight(launcher, legacy)
    assert refusal is not None
    assert refusal.findings[0].message.startswith(
        "role server runs 2 SGLang CPU ranks, and SGLANG_CPU_OMP_THREADS_BIND=0-7 names 1 CPU group(s)")
    assert preflight(launcher, replace(two, env={"SGL_CPU_OMP_THREADS_BIND": "0-3|4-7"})) is None
    # the server inherits kvcheck's own environment under the role's
    monkeypatch.setenv("SGL_CPU_OMP_THREADS_BIND", "0-3|4-7")
    assert preflight(launcher, two) is None


def test_no_gpu_check_skips_the_host_check_too() -> None:
    # the engine runs where this host's inventory does not apply (a container, a wrapper)
    assert preflight(LocalLauncher(gpu_check=False, host_reader=lambda: host(None)), cpu_target()) is None


def test_a_vllm_kv_space_above_the_available_memory_is_refused() -> None:
    base = replace(cpu_target(), engine="vllm", engine_version="0.32.0")
    launcher = LocalLauncher(host_reader=lambda: host(8 * 2**30))
    assert preflight(launcher, replace(base, env={"VLLM_CPU_KVCACHE_SPACE": "8"})) is None
    refusal = preflight(launcher, replace(base, env={"VLLM_CPU_KVCACHE_SPACE": "9"}))
    assert refusal is not None
    assert refusal.findings[0].message == (
        "role server asks for a 9 GiB KV cache (VLLM_CPU_KVCACHE_SPACE), and this host has 8.00 GiB available: "
        "vLLM refuses a KV space above its NUMA node's available memory")
    flag = preflight(launcher, replace(base, args={"kv_cache_memory_bytes": 9 * 2**30}))
    assert flag is not None and "--kv-cache-memory-bytes 9663676416" in flag.findings[0].message
    # before 0.20.0 the CPU worker never reads the flag (it sizes from VLLM_CPU_KVCACHE_SPACE): nothing to refuse
    assert preflight(launcher, replace(base, engine_version="0.19.0", args={"kv_cache_memory_bytes": 9 * 2**30})) is None
    broken = preflight(launcher, replace(base, env={"VLLM_CPU_KVCACHE_SPACE": "4G"}))
    assert broken is not None and "is not a whole number of GiB" in broken.findings[0].message


def test_sglang_is_given_device_cpu_once_and_vllm_nothing() -> None:
    from kvcheck.backends.measure.launchers.command import build_argv

    def argv(target: RoleTarget) -> list[str]:
        return list(build_argv(target, port=30000, bootstrap_port=None, dummy_weights=False))

    given = argv(cpu_target(args={"max_total_tokens": 4096}))
    assert given[given.index("--max-total-tokens"):] == [
        "--max-total-tokens", "4096", "--device", "cpu", "--host", "127.0.0.1", "--port", "30000"]
    own = argv(cpu_target(args={"device": "cpu"}))
    assert own.count("--device") == 1  # the args say it already
    assert "--device" not in argv(make_target())  # a GPU role: SGLang's default
    vllm = argv(replace(cpu_target(), engine="vllm", engine_command=("vllm", "serve")))
    assert vllm == ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--host", "127.0.0.1", "--port", "30000"]


def test_a_short_cpu_pool_is_told_the_engines_own_memory_settings() -> None:
    from kvcheck.model import PoolMeasurement
    from kvcheck.policy.rules import shortfall_hint

    measured = PoolMeasurement(role="server", source="measure", pool_tokens=1920)
    sglang = cpu_target(context_length=4096)
    assert shortfall_hint(sglang, measured) == (
        "the largest context that fits this pool is 1,920 tokens; or give the pool more host memory: raise "
        "--mem-fraction-static, or serve on a host with more RAM per NUMA node")
    assert shortfall_hint(replace(sglang, engine="vllm"), measured) == (
        "the largest context that fits this pool is 1,920 tokens; or give the pool more host memory: raise "
        "VLLM_CPU_KVCACHE_SPACE (GiB) or --kv-cache-memory-bytes, or serve on a host with more RAM per NUMA node")

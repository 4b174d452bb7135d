"""GPU profiles: every shipped card, ambiguous names (exit 2), gpu: mappings and --profiles DIR."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from kvcheck.engines.sglang.sizing import estimate_role
from kvcheck.gpus import GpuNameError, GpuProfiles, PreBaseline

from .helpers import model_config, role

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "single-server"

# The cards issue 12 asks for, by the name an operator would write, with the memory SGLang reads.
CARDS = {
    "H800": 81559, "A800-80GB": 81920, "GB200": 189471, "GB300": 284208, "B300": 275040, "GH200-96GB": 97871,
    "H100-NVL": 95830, "H100-PCIe": 81559, "H200-NVL": 143771, "L40": 46068, "L40S": 46068, "L20": 46068,
    "A10": 23028, "A10G": 23028, "A40": 46068, "RTX-4090": 24564, "RTX-5090": 32607, "RTX-6000-Ada": 49140,
    "RTX-PRO-6000": 97887, "MI300X": 196592, "MI308X": 196592, "MI325X": 262128, "MI355X": 294896,
    "Ascend-910B": 65536, "Ascend-910C": 65536, "H100": 81559, "H200": 143771, "B200": 183359, "H20": 97871,
    "A100-40GB": 40960, "A100-80GB": 81920, "L4": 23034,
}


def test_every_profile_names_a_source_for_each_figure():
    profiles = GpuProfiles.load()
    for profile in profiles.profiles:
        assert profile.memory_source.strip(), profile.name
        assert profile.pre_baseline.source.strip(), profile.name


@pytest.mark.parametrize("gpu", sorted(CARDS))
def test_every_card_is_estimated(gpu):
    profiles = GpuProfiles.load()
    assert profiles.get(gpu).memory_total_mib == CARDS[gpu]
    est = estimate_role(role("Qwen--Qwen3-1.7B", gpu=gpu), offline=True)
    assert est.details["gpu"] == gpu
    assert est.details["gpu_memory_mib"] == CARDS[gpu]
    assert est.pool_tokens > 0


@pytest.mark.parametrize(
    ("name", "profile"),
    [("NVIDIA H800", "H800"), ("NVIDIA A10G", "A10G"), ("NVIDIA GeForce RTX 4090", "RTX-4090"),
     ("NVIDIA H100 NVL", "H100-NVL"), ("NVIDIA H100 PCIe", "H100-PCIe"), ("NVIDIA H200 NVL", "H200-NVL"),
     ("NVIDIA GB200", "GB200"), ("AMD Instinct MI308X", "MI308X"), ("Ascend910B3", "Ascend-910B"),
     ("NVIDIA A100-SXM4-40GB", "A100-40GB"), ("NVIDIA A100 80GB PCIe", "A100-80GB-PCIe"), ("H100", "H100")],
)
def test_nvidia_smi_names_find_their_profile(name, profile):
    assert GpuProfiles.load().get(name).name == profile


@pytest.mark.parametrize(
    ("name", "choices"),
    [("A100", ["A100-40GB", "A100-80GB-PCIe", "A100-80GB"]), ("A800", ["A800-40GB", "A800-80GB"]),
     ("GH200", ["GH200-144GB", "GH200-96GB"])],
)
def test_a_family_name_is_ambiguous(name, choices):
    profiles = GpuProfiles.load()
    assert profiles.find(name) is None
    assert sorted(p.name for p in profiles.matches(name)) == sorted(choices)
    with pytest.raises(GpuNameError, match=f"gpu '{name}' is ambiguous: it may mean "):
        profiles.get(name)


def test_pre_baseline_table_interpolates_between_fitted_rank_counts():
    pre = PreBaseline(900, 50, 300, "test", 40, ((8, 2990.0),))
    assert pre.mib(1) == 900
    assert pre.mib(8) == 2990
    assert pre.mib(2) == pytest.approx(900 + 2090 / 7)
    assert pre.mib(10) == 2990 + 2 * 50
    assert pre.band(8) == 300 + 7 * 40


def _manifest(tmp_path: Path, gpu_yaml: str) -> Path:
    (tmp_path / "config.json").write_text((EXAMPLE / "llama-3.1-8b-instruct.config.json").read_text())
    path = tmp_path / "manifest.yaml"
    path.write_text(
        textwrap.dedent(
            """\
            name: gpu test
            context_length: 131072
            model:
              path: meta-llama/Llama-3.1-8B-Instruct
              config: config.json
            engine:
              version: "0.5.23"
            """
        )
        + gpu_yaml
        + "roles:\n  server: {}\n"
    )
    return path


def test_ambiguous_gpu_is_exit_2_listing_the_choices(tmp_path, kvcheck):
    result = kvcheck("verify", str(_manifest(tmp_path, "gpu: A100\n")), "--mode", "estimate")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert (
        f"{tmp_path / 'manifest.yaml'}:8:6: gpu: gpu 'A100' is ambiguous: it may mean A100-40GB (NVIDIA A100 40GB "
        "(SXM4 or PCIe), 40,960 MiB), A100-80GB-PCIe (NVIDIA A100 80GB PCIe, 81,920 MiB), A100-80GB (NVIDIA A100 "
        "SXM4 80GB, 81,920 MiB)"
    ) in result.stderr


def test_gpu_mapping_describes_a_card_without_a_profile(tmp_path, kvcheck):
    manifest = _manifest(
        tmp_path, "gpu: {name: Acme X1, memory_mib: 65536, compute_capability: '9.0', pre_baseline_mib: 1024}\n"
    )
    result = kvcheck("verify", str(manifest), "--mode", "estimate", "--format", "json")
    assert result.exit_code == 0, result.stderr
    details = json.loads(result.stdout)["roles"][0]["details"]
    assert (details["gpu"], details["gpu_memory_mib"], details["pre_baseline_used_mib"]) == ("Acme X1", 65536, 1024)
    assert details["attention_backend"] == "fa3"  # capability 9.0: Hopper defaults


@pytest.mark.parametrize(
    ("gpu_yaml", "message"),
    [
        ("gpu: {name: X}\n", "gpu.memory_mib: missing required key 'memory_mib'"),
        ("gpu: {name: X, memory_mib: 0}\n", "gpu.memory_mib: Input should be greater than 0"),
        ("gpu: {name: X, memory_mib: 1024, vendor: intel}\n", "gpu.vendor: Input should be 'nvidia', 'amd' or 'huawei'"),
        ("gpu: {name: X, memory_mib: 1024, colour: red}\n", "gpu.colour: unknown key 'colour'"),
    ],
)
def test_bad_gpu_mapping_is_exit_2_with_its_line(tmp_path, kvcheck, gpu_yaml, message):
    result = kvcheck("verify", str(_manifest(tmp_path, gpu_yaml)), "--mode", "estimate")
    assert result.exit_code == 2
    assert f"{tmp_path / 'manifest.yaml'}:8:" in result.stderr
    assert message in result.stderr


def test_profiles_dir_adds_a_card_without_editing_the_package(tmp_path, kvcheck):
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "acme.yaml").write_text(
        "name: Acme-X2\nvendor: nvidia\ndescription: Acme X2 48GB\naliases: [ACME X2]\ncompute_capability: '8.9'\n"
        "memory_total_mib: 49152\nmemory_source: vendor datasheet\npre_baseline_mib: {base: 900, source: measured}\n"
    )
    manifest = _manifest(tmp_path, "gpu: ACME X2\n")
    without = kvcheck("verify", str(manifest), "--mode", "estimate")
    assert without.exit_code == 2  # a card no profile knows is invalid input, not "could not check" (issue 21)
    assert "gpu: unknown GPU 'ACME X2'" in without.stderr
    for command in (["verify", str(manifest), "--mode", "estimate"], ["plan", str(manifest)]):
        result = kvcheck(*command, "--profiles", str(folder), "--format", "json")
        assert result.exit_code == 0, result.stderr
        details = json.loads(result.stdout)["roles"][0]["details"]
        assert (details["gpu"], details["gpu_memory_mib"], details["pre_baseline_used_mib"]) == ("Acme-X2", 49152, 900)


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "no such folder"), ("", "no *.yaml GPU profile in it"), ("name: X\n", "not a valid GPU profile"),
     ("name: X\nvendor: nvidia\ncompute_capability: '9.0'\nmemory_total_mib: 81559000\nmemory_source: typo\n"
      "pre_baseline_mib: {base: 900, source: s}\n", "memory_total_mib must be between 1 and 2,097,152 MiB (2 TiB)")],
)
def test_bad_profiles_dir_is_exit_2(tmp_path, kvcheck, content, message):
    folder = tmp_path / "profiles"
    if content is not None:
        folder.mkdir()
        if content:
            (folder / "bad.yaml").write_text(content)
    result = kvcheck("verify", str(_manifest(tmp_path, "gpu: H100\n")), "--mode", "estimate", "--profiles", str(folder))
    assert result.exit_code == 2
    assert message in result.stderr


def test_ascend_uses_sglangs_npu_defaults():
    est = estimate_role(role(model_config("Qwen--Qwen3-32B"), gpu="Ascend-910B", tp_size=2, mem_fraction_static=0.8))
    assert (est.details["attention_backend"], est.details["page_size"]) == ("ascend", 128)
    assert est.pool_tokens % 128 == 0

"""Which flag catalogue a declared SGLang release is checked against, end to end through the CLI.

Every release from 0.4.0 has its own catalogue (a post release with an unchanged parser shares its
release's). A post or local build of a catalogued release is checked silently; a release older than
every catalogue is checked against the oldest with a KV204 warning, never refused.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kvcheck.engines.sglang.catalogue import load_catalogue
from kvcheck.errors import InputError
from tests.conftest import EXAMPLES, run_kvcheck

SINGLE = EXAMPLES / "single-server"


def manifest(tmp_path: Path, version: str, args: str = "", roles: str | None = None) -> Path:
    """The single-server example (Llama 3.1 8B on one H100) at `version`, with extra args."""
    shutil.copy(SINGLE / "llama-3.1-8b-instruct.config.json", tmp_path)
    roles = roles or "  server:\n    gpus: [0]\n" + (f"    args:\n{args}" if args else "")
    path = tmp_path / "manifest.yaml"
    path.write_text(
        "context_length: 131072\n"
        "model: {path: meta-llama/Llama-3.1-8B-Instruct, config: llama-3.1-8b-instruct.config.json}\n"
        f'engine: {{version: "{version}"}}\n'
        "gpu: H100\n"
        f"roles:\n{roles}",
        encoding="utf-8",
    )
    return path


def verify(path: Path, *extra: str) -> tuple[int, dict]:
    result = run_kvcheck("verify", str(path), "--mode", "estimate", "--format", "json", *extra)
    assert result.stdout, result.stderr
    return result.exit_code, json.loads(result.stdout)


def codes(report: dict) -> list[str]:
    return [f["rule"] for f in report["findings"]]


@pytest.mark.parametrize(
    ("declared", "used"),
    [
        ("0.4.1", "0.4.1"),
        ("0.4.3.post2", "0.4.3.post1"),  # same parser as post1: no file of its own
        ("0.5.19", "0.5.19"),
        ("0.5.23.post1", "0.5.23"),  # not released when these catalogues were made
        ("0.5.23+cu129", "0.5.23"),
        ("0.4.1.post9", "0.4.1.post7"),
    ],
)
def test_a_catalogued_release_and_its_post_builds_need_no_stand_in(declared, used):
    catalogue, note = load_catalogue(declared)
    assert (catalogue.version, note) == (used, None)


def test_a_release_older_than_every_catalogue_gets_the_oldest_with_a_note():
    catalogue, note = load_catalogue("0.3.6.post3")
    assert catalogue.version == "0.4.0"
    assert note == (
        "SGLang 0.3.6.post3 is older than every flag catalogue kvcheck ships; arguments were checked "
        "against 0.4.0, the oldest, so a flag that 0.3.6.post3 accepted and 0.4.0 does not is reported as unknown"
    )


def test_a_pre_release_is_not_its_release():
    catalogue, note = load_catalogue("0.5.23rc1")
    assert catalogue.version == "0.5.22"
    assert note == (
        "no flag catalogue for SGLang 0.5.23rc1; arguments were checked against 0.5.22, the nearest older release"
    )
    with pytest.raises(InputError, match="not a version number"):
        load_catalogue("latest")


def test_an_old_release_is_checked_not_refused(tmp_path):
    code, report = verify(manifest(tmp_path, "0.4.1", "      tp-size: 1\n      mem-fraction-static: 0.88\n"))
    assert (code, report["verdict"], codes(report)) == (0, "pass", [])
    assert run_kvcheck("verify", str(tmp_path / "manifest.yaml"), "--mode", "estimate", "--strict").exit_code == 0


def test_a_0_3_release_is_checked_against_the_oldest_catalogue_with_a_warning(tmp_path):
    path = manifest(tmp_path, "0.3.6", "      tp-size: 1\n")
    code, report = verify(path)
    assert (code, report["verdict"]) == (0, "pass")
    assert report["findings"] == [
        {
            "rule": "KV204",
            "severity": "warning",
            "role": None,
            "message": "SGLang 0.3.6 is older than every flag catalogue kvcheck ships; arguments were checked "
            "against 0.4.0, the oldest, so a flag that 0.3.6 accepted and 0.4.0 does not is reported as unknown",
            "hint": "upgrade kvcheck or generate the release's catalogue (docs/flag-catalogues.md)",
            "location": None,
        }
    ]
    # The warning blocks a --strict gate.
    assert verify(path, "--strict")[0] == 1


def test_a_post_release_uses_its_release_catalogue_silently_even_under_strict(tmp_path):
    path = manifest(tmp_path, "0.5.23.post1", "      cuda-graph-max-bs-decode: 256\n")
    assert (verify(path)[0], codes(verify(path)[1])) == (0, [])
    assert verify(path, "--strict")[0] == 0


def test_a_flag_of_an_old_release_only_is_accepted_there_and_refused_later(tmp_path):
    args = "      disable-jump-forward: true\n"
    old = manifest(tmp_path, "0.4.3.post2", args)
    assert verify(old)[0] == 0
    new = manifest(tmp_path, "0.5.23", args)
    result = run_kvcheck("verify", str(new), "--mode", "estimate")
    assert (result.exit_code, result.stdout) == (2, "")
    assert (
        f"{new}:9:7: roles.server.args.disable-jump-forward: flag '--disable-jump-forward' was removed in "
        "SGLang 0.5.23 (last in 0.4.3.post2)"
    ) in result.stderr


def test_the_0_5_19_cuda_graph_flag_is_accepted_there_and_points_to_its_successor_in_0_5_20(tmp_path):
    args = "      cuda-graph-max-bs: 256\n"
    assert verify(manifest(tmp_path, "0.5.19", args))[0] == 0
    path = manifest(tmp_path, "0.5.20", args)
    result = run_kvcheck("verify", str(path), "--mode", "estimate")
    assert result.exit_code == 2
    assert (
        "roles.server.args.cuda-graph-max-bs: flag '--cuda-graph-max-bs' was removed in SGLang 0.5.20 "
        "(last in 0.5.19); use '--cuda-graph-max-bs-decode' (as a prefix it is ambiguous: "
        "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill; argparse exits 2)"
    ) in result.stderr


DISAGGREGATED = (
    "  prefill:\n    gpus: [0]\n    args: {disaggregation-mode: prefill}\n"
    "  decode:\n    gpus: [1]\n    args: {disaggregation-mode: decode}\n"
)


@pytest.mark.parametrize(
    ("version", "kv201"), [("0.4.4.post2", True), ("0.5.5", True), ("0.5.21", True), ("0.5.22", False)]
)
def test_releases_without_the_admission_fixes_keep_kv201(tmp_path, version, kv201):
    code, report = verify(manifest(tmp_path, version, roles=DISAGGREGATED))
    expected = ["KV201", "KV201"] if kv201 else []
    assert [c for c in codes(report) if c == "KV201"] == expected
    assert code == (1 if kv201 else 0)


def test_a_release_before_disaggregation_has_no_disaggregation_flags(tmp_path):
    """--disaggregation-mode first appears in 0.4.4.post2's parser."""
    assert load_catalogue("0.4.4.post2")[0].resolve("disaggregation-mode").name == "--disaggregation-mode"
    result = run_kvcheck("verify", str(manifest(tmp_path, "0.4.4", roles=DISAGGREGATED)), "--mode", "estimate")
    assert result.exit_code == 2
    assert "unknown SGLang flag 'disaggregation-mode' (SGLang 0.4.4)" in result.stderr


@pytest.mark.parametrize(
    ("version", "hint"),
    [
        ("0.5.20", "SGLang 0.5.20 has no KV checksum (--disaggregation-enable-kv-checksum came in 0.5.21); "
                   "deploy 0.5.22 or later and add it to both roles"),
        ("0.5.21", "add disaggregation-enable-kv-checksum: true to both prefill and decode args"),
    ],
)
def test_kv203_does_not_ask_for_a_flag_the_release_lacks(tmp_path, version, hint):
    code, report = verify(manifest(tmp_path, version, roles=DISAGGREGATED))
    assert [f["hint"] for f in report["findings"] if f["rule"] == "KV203"] == [hint, hint]

"""The estimator's config download (model.path without model.config): a hostile Hub endpoint
(`HF_ENDPOINT`, a mirror, a proxy) gets the same bounds as audit's servers. Each attack is served on
a real loopback socket; kvcheck must end with "could not estimate" (KV305, exit 3) in bounded time and
memory, and a well-formed config from the same place must still be sized (the control)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.datapaths import MODELS
from tests.security.helpers import PEAK_MIB_LIMIT, RawServer, attack, gzip_bomb, send_body, trickle_headers

CONFIG = "/org/model/resolve/main/config.json"
MANIFEST = """\
name: hub
context_length: 32768
model:
  path: org/model
engine:
  version: "0.5.23"
gpu: H100
roles:
  server: {gpus: [0]}
"""


ATTACKS = {
    "stacked gzip": (send_body(gzip_bomb(2048, 2), headers={"content-encoding": "gzip, gzip"}),
                     "the answer is larger than 4 MiB after gzip decoding"),
    "64 MiB body": (send_body(b"{" + b" " * (64 << 20) + b"}"), "larger than 4 MiB"),
    "100k-deep JSON": (send_body(b"[" * 100_000 + b"]" * 100_000), "nested deeper than 64 levels"),
    "duplicate keys": (send_body(b'{"num_hidden_layers": 1, "num_hidden_layers": 80}'), "num_hidden_layers"),
    "trickled headers": (trickle_headers, "gave no complete answer for 'org/model' within 20 s"),
}


def _verify(tmp_path: Path, url: str, timeout: float = 60):
    manifest = tmp_path / "hub.yaml"
    manifest.write_text(MANIFEST)
    return attack("verify", str(manifest), "--mode", "estimate", "--format", "json",
                  env={"HF_ENDPOINT": url, "HF_HUB_OFFLINE": ""}, timeout=timeout, process=True)


# the trickle takes the whole 20 s request deadline: slow (CONTRIBUTING.md, "Tests and benchmarks")
@pytest.mark.parametrize(("handler", "message"), [
    pytest.param(*case, id=name, marks=[pytest.mark.slow] if name == "trickled headers" else [])
    for name, case in ATTACKS.items()
])
def test_a_hostile_hub_is_kv305_in_bounded_time_and_memory(tmp_path, handler, message):
    with RawServer({CONFIG: handler}) as server:
        out = _verify(tmp_path, server.url)
    assert out.exit_code == 3, out.stderr
    [found] = json.loads(out.stdout)["findings"]
    assert (found["rule"], found["role"]) == ("KV305", "server")
    assert message in found["message"]
    assert out.peak_mib < PEAK_MIB_LIMIT
    assert out.seconds < 30  # the trickle is cut at the 20 s whole-request deadline


def test_a_well_formed_config_from_the_same_endpoint_is_sized(tmp_path):
    config = (MODELS / "Qwen--Qwen3-8B.json").read_bytes()
    with RawServer({CONFIG: send_body(config)}) as server:
        out = _verify(tmp_path, server.url)
    assert out.exit_code == 0, out.stderr
    [role] = json.loads(out.stdout)["roles"]
    assert role["status"] == "pass" and role["pool_tokens"] > 32768

"""A manifest's dotted args keys, as kvcheck boots them, against the real vLLM 0.32.0 parser: the command line kvcheck
builds from `compilation-config.cudagraph_capture_sizes: [1, 2, 4]` (and kv-transfer-config's, hf-overrides' keys)
gives vLLM the same values as the dotted command line a user would type. No engine boots."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from kvcheck.engines import get_engine
from kvcheck.inputs.manifest.load import load_manifest
from tests.engines.real.conftest import RealVllm

pytestmark = [pytest.mark.real_engine]

PARSE = r"""
import json, sys
from vllm.entrypoints.cli.serve import ServeSubcommand
from vllm.utils.argparse_utils import FlexibleArgumentParser
out = []
for argv in json.loads(sys.argv[1]):
    parser = FlexibleArgumentParser(description="kvcheck")
    ServeSubcommand().subparser_init(parser.add_subparsers(required=False, dest="subparser"))
    args = parser.parse_args(argv)
    kv = args.kv_transfer_config
    out.append({"cudagraph_capture_sizes": args.compilation_config.cudagraph_capture_sizes,
                "mode": args.compilation_config.mode,
                "kv": [kv.kv_connector, kv.kv_role, kv.kv_connector_extra_config], "hf": args.hf_overrides})
print("KVCHECK" + json.dumps(out))
"""

MANIFEST = """\
context_length: 4096
model: {path: m}
engine: {name: vllm, version: "0.32.0"}
device: cpu
args:
  max-model-len: 4096
  kv-transfer-config.kv_connector: NixlConnector
roles:
  decode:
    args:
      compilation-config.cudagraph_capture_sizes: [1, 2, 4]
      kv-transfer-config.kv_role: kv_consumer
      kv-transfer-config.kv_connector_extra_config.backends: [UCX]
      hf-overrides.max_position_embeddings: 4096
"""
TYPED = ["serve", "m", "--max-model-len", "4096", "--kv-transfer-config.kv_connector", "NixlConnector",
         "--compilation-config.cudagraph_capture_sizes", "[1,2,4]", "--kv-transfer-config.kv_role", "kv_consumer",
         "--kv-transfer-config.kv_connector_extra_config.backends", '["UCX"]',
         "--hf-overrides.max_position_embeddings", "4096"]


def test_the_boot_command_line_gives_vllm_what_the_dotted_command_line_does(tmp_path: Path,
                                                                           real_vllm: RealVllm) -> None:
    python = real_vllm.python
    path = tmp_path / "m.yaml"
    path.write_text(MANIFEST, encoding="utf-8")
    [target] = load_manifest(path).targets
    boot = get_engine("vllm").launch_argv(target, host="127.0.0.1", port=8000)
    assert boot[:2] == ["vllm", "serve"]
    done = subprocess.run([str(python), "-c", PARSE, json.dumps([boot[1:], TYPED])], capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    [line] = [row for row in done.stdout.splitlines() if row.startswith("KVCHECK")]
    ours, typed = json.loads(line.removeprefix("KVCHECK"))
    assert ours == typed == {"cudagraph_capture_sizes": [1, 2, 4], "mode": None,
                             "kv": ["NixlConnector", "kv_consumer", {"backends": ["UCX"]}],
                             "hf": {"max_position_embeddings": 4096}}

"""`kvcheck probe` against real SGLang 0.5.23 on CPU and a real sglang-router 0.3.2 in front of it.

The server loads a second tiny model whose vocabulary is 1,024 ids: the probe's old filler ids (1000
to 5096) killed such a server (IndexError in the embedding, the server down, and kvcheck said KV320,
the network). Now every id comes from the server's own tokenizer, the server survives, and a request
that does kill it (a wrong --vocab-size given by the user) is reported as KV323. Through the router,
/v1/completions answers 422 to token-id prompts: the probe sends counted text instead and passes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, run_kvcheck
from tests.engines.real.conftest import (
    TAG_VAR,
    RealSglang,
    Server,
    free_port,
    running_server,
    stop_tagged,
)

pytestmark = [pytest.mark.real_engine, pytest.mark.slow]

WINDOW = 2048
POOL = 4096
BOUND = WINDOW - 6  # min(2048 - 1, 4096 - 1) - 5
VOCAB = 1024
MAKE_MODEL = Path(__file__).resolve().parent / "make_tiny_model.py"
ROUTER_READY_S = 300  # the router registers its worker (and loads the tokenizer) in seconds here


@pytest.fixture(scope="module")
def small_model(real_sglang: RealSglang, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Llama with a 1,024-id vocabulary (about 10 s to make)."""
    out = tmp_path_factory.mktemp("tiny-llama-v1024")
    done = subprocess.run([str(real_sglang.python), str(MAKE_MODEL), str(out), "--vocab", str(VOCAB),
                           "--max-positions", "4096"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    assert json.loads((out / "config.json").read_text())["vocab_size"] == VOCAB
    return out


def server_args(model: Path) -> tuple[str, ...]:
    # the fixture names the default model first; the later --model-path wins
    return ("--model-path", str(model), "--context-length", str(WINDOW), "--max-total-tokens", str(POOL))


@pytest.fixture(scope="module")
def small_server(real_sglang: RealSglang, small_model: Path,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("small-server") / "server.log"
    with running_server(real_sglang, log, *server_args(small_model)) as srv:
        print(f"server (vocabulary {VOCAB}) ready after {srv.boot_s:.1f} s")
        yield srv


@contextlib.contextmanager
def running_router(real: RealSglang, worker: Server, log: Path) -> Iterator[str]:
    """sglang-router in front of `worker` on a free port, until it lists the worker's model; stopped on
    every way out (its process group, then whatever carries its tag)."""
    tag = uuid.uuid4().hex
    port = free_port()
    argv = [str(real.python), "-m", "sglang_router.launch_router", "--worker-urls", worker.url,
            "--host", "127.0.0.1", "--port", str(port)]
    env = dict(os.environ, **{TAG_VAR: tag})
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ROUTER_READY_S
        while not _lists_a_model(url):
            if proc.poll() is not None:
                raise AssertionError(f"the router exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"the router lists no model after {ROUTER_READY_S} s:\n{log.read_text()[-4000:]}")
            time.sleep(0.5)
        yield url
    finally:
        stop_tagged(proc, tag, "router", sig=signal.SIGTERM)


def _lists_a_model(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/v1/models", timeout=5) as answer:
            return bool(json.loads(answer.read()).get("data"))
    except (OSError, ValueError):
        return False


@pytest.fixture(scope="module")
def router(real_sglang: RealSglang, small_server: Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_router(real_sglang, small_server, tmp_path_factory.mktemp("router") / "router.log") as url:
        yield url


def probe_json(*args: str) -> tuple[int, dict, str]:
    done = run_kvcheck("probe", *args, "--tenants", "2", "--rounds", "1", "--seed", "1", "--format", "json",
                       cwd=REPO_ROOT, timeout=900)
    assert done.stdout, done.stderr
    return done.exit_code, json.loads(done.stdout), done.stderr


def health(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url + "/health", timeout=10) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


def ids_sent(report: dict) -> set[int]:
    """Every id of the run's token prompts: the owners' patterns and the filler the notes name."""
    limits_row = report["roles"][0]["details"]
    ids = {i for owner in limits_row["owners"].values() for i in owner["pattern"]}
    [proof] = [n for n in limits_row["notes"] if n.startswith("token ids proven in range by")]
    ids.add(int(proof.split("filler ")[1].split(",")[0]))
    return ids


def requests_of(report: dict, endpoint: str) -> list[dict]:
    return [r for role in report["roles"][1:] for r in role["details"].get("requests") or ()
            if r["endpoint"] == endpoint]


def test_probe_of_a_server_with_a_small_vocabulary_is_exit_0_and_the_server_survives(small_server: Server) -> None:
    code, report, stderr = probe_json(small_server.url)
    assert code == 0, (json.dumps(report, indent=1)[:6000], stderr)
    assert report["findings"] == []
    limits = report["roles"][0]["details"]["limits"]
    assert (limits["window_tokens"], limits["max_req_input_len"], limits["pool_tokens"]) == (WINDOW, BOUND, POOL)
    sent = ids_sent(report)
    assert max(sent) < VOCAB and min(sent) >= 0, sorted(sent)
    assert any(n.startswith("token ids proven in range by the deployment's tokenizer (POST /v1/tokenize)")
               for n in report["roles"][0]["details"]["notes"])
    assert health(small_server.url) == 200
    assert "IndexError" not in small_server.log.read_text(errors="replace")


def test_probe_through_sglang_router_is_exit_0_with_completions_as_counted_text(router: str,
                                                                                small_server: Server) -> None:
    # the router serves no /server_info: the limits come from the options, as docs/probe.md says
    code, report, stderr = probe_json(router, "--context-length", str(WINDOW), "--pool", str(POOL))
    assert code == 0, (json.dumps(report, indent=1)[:6000], stderr)
    assert report["findings"] == []
    sent = report["roles"][0]["details"]["sent"]
    assert [(s["method"], s["path"], s["status"]) for s in sent[:2]] == [
        ("GET", "/server_info", 404), ("GET", "/get_server_info", 200)]  # {"router_manager": true, ...}
    # the token-id /v1/completions request got the router's 422 and was replaced, not judged
    assert ("POST", "/v1/completions", 422) in [(s["method"], s["path"], s["status"]) for s in sent]
    completions = requests_of(report, "/v1/completions")
    assert [(r["check"], r["prompt"], r["prompt_tokens"], r["status"], r["verdict"]) for r in completions] == [
        ("control", "words", None, 200, "ok"),
        ("below-bound", "words", BOUND - 1, 200, "ok"),
        ("at-bound", "words", BOUND, 400, "ok"),
        ("window", "words", WINDOW, 400, "ok"),
    ]
    assert completions[1]["reported_prompt_tokens"] == BOUND - 1  # the counted text arrived at its length
    notes = report["roles"][0]["details"]["notes"]
    assert any("/v1/completions refused token-id prompts (HTTP 422" in n and "request-format refusal" in n
               for n in notes), notes
    assert max(ids_sent(report)) < VOCAB
    assert health(small_server.url) == 200


def test_a_request_that_kills_the_server_is_kv323_exit_3(real_sglang: RealSglang, small_model: Path,
                                                          tmp_path: Path) -> None:
    # The user states a vocabulary of 8,192 for a model of 1,024 and asks for filler id 2000: the probe
    # takes the user's word, the real scheduler dies on the first prompt, and the report says so.
    with running_server(real_sglang, tmp_path / "server.log", *server_args(small_model)) as srv:
        code, report, stderr = probe_json(srv.url, "--vocab-size", "8192", "--token-id", "2000",
                                          "--request-timeout", "120")
        assert code == 3, (json.dumps(report, indent=1)[:6000], stderr)
        assert [(f["rule"], f["role"]) for f in report["findings"]] == [("KV323", "limits")]
        message = report["findings"][0]["message"]
        assert message.startswith("request #1 /generate control (32 tokens, boundary-1) lost its answer")
        assert "the probe's request crashed the server" in message
        paths = [(s["method"], s["path"]) for s in report["roles"][0]["details"]["sent"]]
        assert paths[-2:] == [("POST", "/generate"), ("GET", "/health")]  # nothing after the crash
        assert health(srv.url) is None
        assert "IndexError" in srv.log.read_text(errors="replace")

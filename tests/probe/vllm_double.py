"""A double of a vLLM deployment's front door for `kvcheck probe`, written from real vLLM 0.32.0's answers.

Captured on this machine from `vllm serve tiny-llama --max-model-len 4096 --kv-cache-memory-bytes 16777216`
(CPU, the tiny model of tests/engines/real/make_vllm_model.py); the answers below are the engine's, word
for word, where they matter to the probe:

- /v1/completions with a token-id prompt of N tokens and max_tokens M: N <= max_model_len - 1 is HTTP 200,
  `usage.prompt_tokens` N, `completion_tokens` min(M, max_model_len - N), finish_reason "length"; N ==
  max_model_len is HTTP 400 "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)";
  N > max_model_len is HTTP 400 "This model's maximum context length is 4096 tokens. However, your prompt
  contains at least 4097 input tokens, ..."; an id >= the vocabulary is HTTP 400 "Token id 8192 is out of
  vocabulary". A streamed request is refused the same way before the stream starts; a served stream is
  SSE chunks, the last with finish_reason, then a usage chunk (stream_options.include_usage), then
  `data: [DONE]`. `request_id` R makes the answer's id `cmpl-R`. Text prompts get the BOS token (id 0).
- POST /tokenize takes one prompt string (a list is HTTP 400 "2 validation errors ..."), answers
  {"count", "max_model_len", "tokens", "token_strs": null}.
- /v1/models lists the model with `root` (its path) and `max_model_len`; /version {"version": "0.32.0"};
  /metrics the real exposition (tests/data/vllm/0.32.0-cpu-pass.metrics.txt: 128 blocks of 128);
  /health 200 with an empty body; every other path 404 {"detail": "Not Found"}.

Behaviours, the real engine's or a router's in front of it:
- "fixed": vLLM 0.32.0 as above.
- "truncate": a router that cuts every prompt to max_model_len - 1 tokens and serves it (200).
- "leak": over-long prompts get HTTP 200 whose text is an earlier request's prompt (a stale page):
  other tenants' markers and token patterns.
- "unavailable": every completion is HTTP 503 (a router with no healthy backend).

`router=True`: a router in front of vLLM (llm-d's gateway, production-stack): /metrics without vLLM's
cache gauge (HTTP 404), /version 404; /v1/models still states max_model_len. `tokenize=False`: no
/tokenize (HTTP 404). Every request is counted. Stdlib only; 127.0.0.1, ephemeral port; threaded.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.conftest import REPO_ROOT

METRICS = (REPO_ROOT / "tests/data/vllm/0.32.0-cpu-pass.metrics.txt").read_text()
MODEL = "/models/tiny-llama"
BOS = 0
NOT_FOUND = {"detail": "Not Found"}


@dataclass
class _State:
    lock: threading.Lock = field(default_factory=threading.Lock)
    seen: list[tuple[str, str]] = field(default_factory=list)
    pages: list[tuple[str, list[int]]] = field(default_factory=list)  # served prompts, for "leak"


class VllmFrontDoor:
    """`with VllmFrontDoor(...) as d:`; `d.url`, `d.seen` ([(method, path)]), `d.bodies` (POST bodies)."""

    def __init__(self, behaviour: str = "fixed", *, max_model_len: int = 4096, vocab: int = 8192,
                 router: bool = False, tokenize: bool = True, model: str = MODEL) -> None:
        self.behaviour = behaviour
        self.max_model_len = max_model_len
        self.vocab = vocab
        self.router = router
        self.tokenize = tokenize
        self.model = model
        self.bodies: list[dict[str, Any]] = []
        self._state = _State()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def seen(self) -> list[tuple[str, str]]:
        with self._state.lock:
            return list(self._state.seen)

    def __enter__(self) -> VllmFrontDoor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    # -- the engine's rules ------------------------------------------------------------------------

    def word_ids(self, text: str, *, bos: bool) -> list[int]:
        """A stand-in tokenizer: one id per word (below the vocabulary), BOS first unless asked not to."""
        ids = [100 + sum(map(ord, word)) % (self.vocab - 200) for word in text.split()]
        return ([BOS] if bos else []) + ids

    def completion(self, body: dict[str, Any]) -> tuple[int, dict[str, Any], bool]:
        """(status, payload, stream) for a /v1/completions body, as vLLM 0.32.0 answers it."""
        prompt = body.get("prompt")
        stream = bool(body.get("stream"))
        ids = prompt if isinstance(prompt, list) else self.word_ids(str(prompt), bos=True)
        text = prompt if isinstance(prompt, str) else ""
        if self.behaviour == "unavailable":
            return 503, {"error": {"message": "no healthy backend", "type": "ServiceUnavailable", "code": 503}}, False
        if any(not isinstance(i, int) or i >= self.vocab or i < 0 for i in ids):
            bad = max(i for i in ids if isinstance(i, int))
            return 400, _error(f"Token id {bad} is out of vocabulary", None), False
        n, w = len(ids), self.max_model_len
        if n >= w and self.behaviour == "truncate":
            ids, n = ids[: w - 1], w - 1
        elif n >= w and self.behaviour == "leak":
            with self._state.lock:
                stale_text = " ".join(t for t, _ in self._state.pages[-3:])
                stale_ids = [i for _, p in self._state.pages[-3:] for i in p[:8] + p[-8:]]
            return 200, _completion(body, stale_text, 1, 16, ids=stale_ids), stream
        if n > w:
            return 400, _error(f"This model's maximum context length is {w} tokens. However, your prompt contains "
                               f"at least {n} input tokens, which exceeds this limit even without any output tokens. "
                               f"Please reduce the length of the input prompt. (parameter=input_tokens, value={n})",
                               "input_tokens"), False
        if n == w:
            return 400, _error("max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)",
                               "max_tokens"), False
        made = min(int(body.get("max_tokens") or 16), w - n)
        with self._state.lock:
            self._state.pages.append((text, list(ids)))
        return 200, _completion(body, "ure" * made, n, made), stream

    def tokenized(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """POST /tokenize: one prompt string (a list is a validation error, as on 0.32.0)."""
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            return 400, _error("2 validation errors:\n  {'type': 'string_type', 'loc': 'body.prompt', 'msg': "
                               "'Input should be a valid string'}", "body.prompt")
        tokens = self.word_ids(prompt, bos=body.get("add_special_tokens", True) is not False)
        return 200, {"count": len(tokens), "max_model_len": self.max_model_len, "tokens": tokens, "token_strs": None}

    # -- HTTP ----------------------------------------------------------------------------------------

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        door = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, payload: Any, content_type: str = "application/json") -> None:
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802
                with door._state.lock:
                    door._state.seen.append(("GET", self.path))
                if self.path == "/health":
                    self._send(200, b"", "application/octet-stream")
                elif self.path == "/v1/models":
                    self._send(200, {"object": "list", "data": [{
                        "id": door.model, "object": "model", "created": 1796178932, "owned_by": "vllm",
                        "root": door.model, "parent": None, "max_model_len": door.max_model_len}]})
                elif self.path == "/version" and not door.router:
                    self._send(200, {"version": "0.32.0"})
                elif self.path == "/metrics" and not door.router:
                    self._send(200, METRICS.encode(), "text/plain; version=0.0.4; charset=utf-8")
                else:
                    self._send(404, NOT_FOUND)

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with door._state.lock:
                    door._state.seen.append(("POST", self.path))
                    door.bodies.append(body)
                if self.path == "/tokenize" and door.tokenize:
                    self._send(*door.tokenized(body))
                elif self.path == "/v1/completions":
                    status, payload, stream = door.completion(body)
                    if status == 200 and stream:
                        self._send(200, _sse(payload, body), "text/event-stream; charset=utf-8")
                    else:
                        self._send(status, payload)
                else:
                    self._send(404, NOT_FOUND)

        return Handler


def _error(message: str, param: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": "BadRequestError", "param": param, "code": 400}}


def _completion(body: dict[str, Any], text: str, prompt_tokens: int, completion_tokens: int,
                ids: list[int] | None = None) -> dict[str, Any]:
    rid = body.get("request_id")
    return {
        "id": f"cmpl-{rid}" if rid else "cmpl-9ba950eeddb65155", "object": "text_completion",
        "created": 1796178932, "model": body.get("model") or MODEL,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": "length", "stop_reason": None,
                     "token_ids": ids, "prompt_logprobs": None, "prompt_token_ids": None}],
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion_tokens,
                  "completion_tokens": completion_tokens},
    }


def _sse(payload: dict[str, Any], body: dict[str, Any]) -> bytes:
    choice = payload["choices"][0]
    chunks = [{**payload, "choices": [{**choice, "finish_reason": None, "text": "ure"}]}, payload]
    chunks[-1] = {k: v for k, v in payload.items() if k != "usage"}
    if (body.get("stream_options") or {}).get("include_usage"):
        chunks.append({"id": payload["id"], "object": "text_completion", "created": payload["created"],
                       "model": payload["model"], "choices": [], "usage": payload["usage"]})
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"


def model_folder(tmp: Path, vocab: int) -> Path:
    """A model folder with only a config.json stating `vocab` (for the config.json proof of the ids)."""
    folder = tmp / "tiny-llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "vocab_size": vocab}))
    return folder

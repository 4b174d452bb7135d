"""A deployment double for `kvcheck probe`: SGLang's HTTP surface with the incident's bug, or without it.

Behaviours (`Deployment(behaviour=...)`):
- "incident": prompts of max_req_input_len tokens or more are swapped for a one-token placeholder and
  answered with HTTP 200 and text/ids left over in a shared "stale page" buffer by earlier requests
  (other tenants' markers and patterns), as the disaggregated deployment of the incident did.
- "fixed": SGLang 0.5.23's admission: HTTP 400 with its exact messages (tokenizer check at
  context_len, scheduler check at max_req_input_len), the streaming error chunk and abort shapes,
  and OpenAI's error object.
- "truncate": --allow-auto-truncate: over-long prompts are cut to max_req_input_len and served (200).
- "refuse-all": every generation request gets HTTP 400.
- "unavailable": every generation request gets HTTP 503 (a router with no healthy backend).

Beside the behaviour, like the real engine: `vocab` ids (an id at or above it kills the double as it
kills SGLang's scheduler: the connection drops and /health stops answering), a stand-in tokenizer
behind POST /v1/tokenize (one id per word, below `vocab`; BOS added unless add_special_tokens is
false), `crash_at_tokens` (a prompt that long kills the double too), and `router=True`, which answers
as sglang-router does: no /server_info, /get_server_info as {"router_manager": true, ...}, HTTP 422 to
a token-id prompt on /v1/completions, /v1/tokenize only with a model name and never with BOS.

Every request is counted (GETs included), so tests can assert what the probe sent and that a dry run
sends nothing. Stdlib only; binds 127.0.0.1 on an ephemeral port; threaded.
"""

from __future__ import annotations

import json
import re
import threading
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.doubles import sglang_http

MODEL = "probe-double"
PAGE_IDS = 8  # ids a page keeps from each end of a prompt (the probe's patterns are 8 long)
BOS = 1  # the stand-in tokenizer's begin-of-text id, added to text prompts as SGLang's tokenizer adds it
ROUTER_422 = ("Failed to deserialize the JSON body into the target type: prompt: data did not match any variant "
              "of untagged enum StringOrArray at line 1 column 54")  # sglang-router 0.3.2's words


@dataclass
class Seen:
    """One request the double received."""

    method: str
    path: str
    prompt_tokens: int | None = None


@dataclass
class _State:
    lock: threading.Lock = field(default_factory=threading.Lock)
    seen: list[Seen] = field(default_factory=list)
    pages: list[tuple[str, list[int]]] = field(default_factory=list)  # (text, ids) of served prompts


class Deployment:
    """Start with `with Deployment(...) as d:`; `d.url`, `d.request_count`, `d.seen`."""

    def __init__(
        self,
        behaviour: str = "fixed",
        *,
        context_len: int = 4096,
        pool_tokens: int = 8192,
        has_tokenizer: bool = True,
        server_info: bool = True,
        openai: bool = True,
        redirect_to: str | None = None,
        token: str | None = None,
        host: str = "127.0.0.1",
        vocab: int = 8192,
        tokenize: bool = True,
        crash_at_tokens: int | None = None,
        router: bool = False,
        model_path: str | None = None,
    ) -> None:
        if behaviour not in ("incident", "fixed", "truncate", "refuse-all", "unavailable"):
            raise ValueError(behaviour)
        self.behaviour = behaviour
        self.context_len = context_len
        self.pool_tokens = pool_tokens
        self.max_req_len = min(context_len - 1, pool_tokens - 1)
        self.max_req_input_len = sglang_http.admission_bound(context_len, pool_tokens)
        self.has_tokenizer = has_tokenizer
        self.server_info = server_info
        self.openai = openai
        self.redirect_to = redirect_to
        self.token = token  # when set, every request needs "Authorization: Bearer <token>" (else 401)
        self.vocab = vocab
        self.tokenize = tokenize
        self.crash_at_tokens = crash_at_tokens
        self.router = router
        self.model_path = model_path  # served by /model_info (/get_model_info through the router) when set
        self.crashed = threading.Event()
        self.max_id_seen = -1  # the largest token id any request carried (prompts and /v1/tokenize alike)
        self.state = _State()
        self._server = ThreadingHTTPServer((host, 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="probe-double", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def request_count(self) -> int:
        with self.state.lock:
            return len(self.state.seen)

    @property
    def seen(self) -> list[Seen]:
        with self.state.lock:
            return list(self.state.seen)

    def __enter__(self) -> Deployment:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    # -- SGLang's behaviour ---------------------------------------------------------------------

    def server_info_payload(self) -> dict[str, Any]:
        resolved_args = {
            "model_path": f"/models/{MODEL}",
            "served_model_name": MODEL,
            "skip_tokenizer_init": not self.has_tokenizer,
            "context_length": None,
            "allow_auto_truncate": self.behaviour == "truncate",
            "disaggregation_mode": "null",
            "tp_size": 1,
            "api_key": "sk-secret-never-shown",
        }
        return sglang_http.server_info_payload(
            resolved_args,
            launch_command="python3 -m sglang.launch_server --api-key sk-secret-never-shown",
            max_total_num_tokens=self.pool_tokens,
            max_req_input_len=self.max_req_input_len,
            internal_states=[{"memory_usage": {"token_capacity": self.pool_tokens}}],
        )

    def endpoints(self) -> sglang_http.Endpoints:
        return sglang_http.Endpoints(
            server_info=self.server_info_payload() if self.server_info and not self.router else None,
            models=sglang_http.models_payload(MODEL, self.context_len) if self.openai else None,
            health=True,
        )

    def word_ids(self, text: str, *, bos: bool) -> list[int]:
        """The stand-in tokenizer: one id per whitespace-led word, from 200 up to below the vocabulary."""
        span = max(1, self.vocab - 200)
        ids = [200 + zlib.crc32(word.strip().encode()) % span for word in re.findall(r"\s*\S+", text)]
        return [BOS, *ids] if bos else ids

    def crash(self) -> None:
        """Die as SGLang does when its scheduler raises: stop serving and close the listening socket."""
        if self.crashed.is_set():
            return
        self.crashed.set()

        def stop() -> None:
            self._server.shutdown()
            self._server.server_close()

        threading.Thread(target=stop, name="probe-double-crash", daemon=True).start()

    def kills(self, ids: list[int]) -> bool:
        """True when these ids would kill the real engine (an id outside the vocabulary, or crash_at_tokens)."""
        if ids:
            with self.state.lock:
                self.max_id_seen = max(self.max_id_seen, max(ids))
        if any(i >= self.vocab or i < 0 for i in ids):
            return True
        return self.crash_at_tokens is not None and len(ids) >= self.crash_at_tokens

    def generate(self, prompt: list[int] | str, max_new_tokens: int) -> tuple[int, Any, str]:
        """(status, payload, how): how is 'served', 'tokenizer-error', 'scheduler-abort' or 'stale'."""
        ids = self.word_ids(prompt, bos=True) if isinstance(prompt, str) else list(prompt)
        n = len(ids)
        if self.behaviour == "refuse-all":
            return 400, {"error": {"message": "Service refuses every request (maintenance)."}}, "tokenizer-error"
        if self.behaviour == "unavailable":
            return 503, {"error": {"message": "no healthy upstream"}}, "tokenizer-error"
        if self.behaviour == "truncate":
            if n >= self.max_req_input_len:
                ids = ids[: self.max_req_input_len]
                max_new_tokens = min(max_new_tokens, max(0, self.max_req_len - len(ids) - 1))
            return 200, self._served(prompt, ids, max_new_tokens), "served"
        if n >= self.context_len:
            return 400, {"error": {"message": f"The input ({n} tokens) is longer than the model's context "
                                              f"length ({self.context_len} tokens)."}}, "tokenizer-error"
        if max_new_tokens + n >= self.context_len:
            return 400, {"error": {"message": (
                f"Requested token count exceeds the model's maximum context length of {self.context_len} "
                f"tokens. You requested a total of {max_new_tokens + n} tokens: {n} tokens from the input "
                f"messages and {max_new_tokens} tokens for the completion. Please reduce the number of "
                "tokens in the input messages or the completion to fit within the limit.")}}, "tokenizer-error"
        if n >= self.max_req_input_len:
            if self.behaviour == "incident":
                return 200, self._stale(), "stale"
            message = (f"Input length ({n} tokens) exceeds the maximum allowed length "
                       f"({self.max_req_input_len} tokens). Use a shorter input or enable --allow-auto-truncate.")
            return 400, {"error": {"message": message}}, "scheduler-abort"
        return 200, self._served(prompt, ids, max_new_tokens), "served"

    def _served(self, prompt: list[int] | str, ids: list[int], max_new_tokens: int) -> dict[str, Any]:
        clipped = max(0, min(max_new_tokens, self.max_req_len - len(ids) - 1))
        if isinstance(prompt, str):
            marker = prompt.rsplit(":", 1)[-1].strip()
            text, out_ids = marker, [100 + (ord(c) % 100) for c in marker][:clipped]
        else:
            text, out_ids = "ok", ids[:clipped]
        with self.state.lock:
            page_text = prompt if isinstance(prompt, str) else ""
            self.state.pages.append((page_text, ids[:PAGE_IDS] + ids[-PAGE_IDS:]))
        return _payload(text if clipped else "", out_ids, len(ids), clipped)

    def _stale(self) -> dict[str, Any]:
        """The incident: a one-token placeholder decoded from pages earlier requests left behind."""
        with self.state.lock:
            pages = list(self.state.pages)
        text = " ".join(t for t, _ in pages if t)
        out_ids = [i for _, ids in pages for i in ids] or [7]
        return _payload(text, out_ids, 1, len(out_ids))

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        deployment = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep pytest output clean
                pass

            def _record(self, prompt_tokens: int | None = None) -> None:
                with deployment.state.lock:
                    deployment.state.seen.append(Seen(self.command, self.path, prompt_tokens))

            def _send(self, status: int, payload: Any, *, content_type: str = "application/json") -> None:
                body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _unauthorized(self) -> bool:
                if deployment.token is None or self.headers.get("Authorization") == f"Bearer {deployment.token}":
                    return False
                self._send(401, {"detail": "Unauthorized"})
                return True

            def _redirect(self) -> bool:
                if deployment.redirect_to is None:
                    return False
                self.send_response(307)
                self.send_header("Location", deployment.redirect_to + self.path)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return True

            def do_GET(self) -> None:  # noqa: N802
                self._record()
                if self._unauthorized() or self._redirect():
                    return
                path = self.path.split("?")[0]
                if deployment.router and path == sglang_http.GET_SERVER_INFO:
                    self._send(200, {"router_manager": True, "routers_count": 1, "workers_count": 1})
                    return
                if deployment.model_path and path == ("/get_model_info" if deployment.router else "/model_info"):
                    self._send(200, {"model_path": deployment.model_path, "served_model_name": MODEL})
                    return
                if not deployment.endpoints().answer(self):
                    self._send(404, {"detail": "Not Found"})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length", "0"))
                try:
                    body = json.loads(self.rfile.read(length))
                except ValueError:
                    self._record()
                    self._send(400, {"error": "body is not JSON"})
                    return
                openai = self.path == "/v1/completions"
                prompt = body.get("prompt") if openai else body.get("input_ids", body.get("text"))
                self._record(len(prompt) if isinstance(prompt, list) else None)
                if self._unauthorized() or self._redirect():
                    return
                if self.path == "/v1/tokenize" and deployment.tokenize:
                    self._tokenize(body)
                    return
                if self.path not in ("/generate", "/v1/completions") or (openai and not deployment.openai):
                    self._send(404, {"detail": "Not Found"})
                    return
                if openai and deployment.router and (not isinstance(prompt, str) or "model" not in body):
                    detail = ROUTER_422 if not isinstance(prompt, str) else "missing field `model`"
                    self._send(422, detail.encode(), content_type="text/plain; charset=utf-8")
                    return
                ids = prompt if isinstance(prompt, list) else deployment.word_ids(prompt or "", bos=True)
                if deployment.kills([i for i in ids if isinstance(i, int)]):
                    self.close_connection = True  # the scheduler died: no answer, and the server goes down
                    deployment.crash()
                    return
                if isinstance(prompt, str) and not deployment.has_tokenizer:
                    self._send(400, {"error": {"message": "text input needs a tokenizer (skip_tokenizer_init)"}})
                    return
                if openai:
                    max_new = body.get("max_tokens", 16)
                else:
                    max_new = body.get("sampling_params", {}).get("max_new_tokens", 128)
                status, payload, how = deployment.generate(prompt, max_new)
                if openai:
                    self._send(status, _openai(status, payload))
                elif body.get("stream"):
                    self._send(200, _sse(status, payload, how), content_type="text/event-stream")
                else:
                    self._send(status, payload)

            def _tokenize(self, body: dict[str, Any]) -> None:
                if deployment.router and body.get("model") != MODEL:
                    self._send(400, {"error": {"message": f"Tokenizer for model '{body.get('model', 'unknown')}' "
                                                          f"not found. Available: {MODEL}",
                                               "type": "tokenizer_not_found"}})
                    return
                if not deployment.has_tokenizer:  # skip_tokenizer_init: SGLang's handler has no tokenizer
                    self._send(500, {"object": "error", "message": "Internal server error during tokenization: "
                                     "'NoneType' object has no attribute 'encode'", "code": 500})
                    return
                bos = bool(body.get("add_special_tokens", True)) and not deployment.router
                prompt = body.get("prompt")
                texts = prompt if isinstance(prompt, list) else [prompt]
                tokens = [deployment.word_ids(text, bos=bos) for text in texts if isinstance(text, str)]
                if isinstance(prompt, list):
                    self._send(200, {"tokens": tokens, "count": [len(t) for t in tokens], "max_model_len": 4096})
                else:
                    self._send(200, {"tokens": tokens[0], "count": len(tokens[0]), "max_model_len": 4096})

        return Handler


def _payload(text: str, out_ids: list[int], prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    finish = {"type": "length", "length": completion_tokens}
    return {"text": text, "output_ids": out_ids,
            "meta_info": {"id": "x", "finish_reason": finish, "prompt_tokens": prompt_tokens,
                          "completion_tokens": completion_tokens, "cached_tokens": 0}}


def _openai(status: int, payload: dict[str, Any]) -> dict[str, Any]:
    if status != 200:
        return {"object": "error", "message": payload["error"]["message"], "type": "BadRequestError",
                "param": None, "code": status}
    meta = payload["meta_info"]
    return {"id": "cmpl-x", "object": "text_completion", "model": MODEL,
            "choices": [{"index": 0, "text": payload["text"], "logprobs": None,
                         "finish_reason": meta["finish_reason"]["type"]}],
            "usage": {"prompt_tokens": meta["prompt_tokens"], "completion_tokens": meta["completion_tokens"],
                      "total_tokens": meta["prompt_tokens"] + meta["completion_tokens"]}}


def _sse(status: int, payload: dict[str, Any], how: str) -> bytes:
    """SGLang's streaming shapes: an error chunk (tokenizer checks), an abort chunk (scheduler), or chunks."""
    if how == "tokenizer-error":
        chunks: list[dict[str, Any]] = [{"error": {"message": payload["error"]["message"],
                                                   "type": "invalid_request_error", "code": status}}]
    elif how == "scheduler-abort":
        chunks = [{"text": "", "output_ids": [], "meta_info": {
            "id": "x", "prompt_tokens": 1, "completion_tokens": 0,
            "finish_reason": {"type": "abort", "message": payload["error"]["message"], "status_code": 400,
                              "err_type": "BadRequestError"}}}]
    else:
        first = {"text": "", "output_ids": [], "meta_info": {**payload["meta_info"], "finish_reason": None}}
        chunks = [first, payload]
    return ("".join(f"data: {json.dumps(chunk)}\n\n" for chunk in chunks) + "data: [DONE]\n\n").encode()

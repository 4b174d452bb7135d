"""What goes over the wire: request bodies for /generate and /v1/completions, and what an answer says.

`Answer` is the probe's reading of one HTTP answer, whatever its shape: SGLang's native success
(`text`, `output_ids`, `meta_info`), its error shapes (`{"error": {"message"}}`, `{"error": "..."}`,
OpenAI's `{"object": "error", ...}`), a server-sent-event stream (chunks, an error chunk, an abort
finish reason with `status_code`), or something else. Judging is elsewhere (judge.py).
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from kvcheck.http import HttpLimitError
from kvcheck.http import request as http_request
from kvcheck.io.jsontext import JsonRejected, parse_json
from kvcheck.probe.plan import COMPLETIONS, PlannedRequest
from kvcheck.probe.transport import ProbeGuardError
from kvcheck.redact import REDACTED

MAX_ANSWER_BYTES = 32 * 1024 * 1024

Kind = Literal["success", "error", "abort", "empty", "unparseable", "no-answer", "not-sent"]


@dataclass(frozen=True)
class Answer:
    """One answer as the probe reads it; `kind` says which shape it had."""

    status: int | None  # HTTP status; None when no answer came (transport error)
    kind: Kind
    latency_ms: float | None
    prompt_tokens: int | None = None  # meta_info.prompt_tokens / usage.prompt_tokens
    completion_tokens: int | None = None
    finish_type: str | None = None  # length, stop, abort
    abort_status: int | None = None  # status_code of an abort finish, or code of a stream error chunk
    message: str | None = None  # error or abort message, or the transport error
    raw_text: str = ""  # the whole body, decoded (scanned for markers)
    id_runs: tuple[tuple[int, ...], ...] = field(default_factory=tuple)  # token-id lists found in the body
    redirect_to: str | None = None

    def short(self) -> str:
        """A few words for tables and messages."""
        if self.kind == "not-sent":
            return f"not sent: {self.message}"
        if self.status is None:
            return f"no answer: {self.message}"
        parts = [f"HTTP {self.status}"]
        if self.kind == "abort":
            parts.append(f"abort (status_code {self.abort_status})")
        elif self.kind == "success":
            parts.append(f"finish {self.finish_type}")
        elif self.kind != "error":
            parts.append(self.kind)
        return ", ".join(parts)


def request_body(planned: PlannedRequest, prompt: list[int] | str, *, rid: str, model: str | None,
                 request_id_field: str | None = None) -> dict[str, Any]:
    """The JSON body a client would send for this planned request (greedy, so markers repeat exactly).

    `request_id_field`: the /v1/completions field the engine takes a request id in (vLLM: request_id),
    so that the probe's requests can be found in its logs; None sends none (sglang-router's schema).
    """
    if planned.endpoint == COMPLETIONS:
        body: dict[str, Any] = {
            "prompt": prompt,
            "max_tokens": planned.max_new_tokens,
            "temperature": 0,
            "stream": planned.stream,
        }
        if planned.stream:  # the usage figures come as a last chunk only when asked for
            body["stream_options"] = {"include_usage": True}
        if model:
            body["model"] = model
        if request_id_field:
            body[request_id_field] = rid
        return body
    key = "text" if isinstance(prompt, str) else "input_ids"
    return {
        key: prompt,
        "sampling_params": {"max_new_tokens": planned.max_new_tokens, "temperature": 0},
        "stream": planned.stream,
        "rid": rid,
    }


def send(client: httpx.Client, path: str, body: dict[str, Any], *, timeout_s: float, deadline_s: float) -> Answer:
    """POST one body and read the whole answer, bounded in size and in time; never raises for HTTP.

    kvcheck.http sets one deadline for the whole request (headers included) and caps the decoded body.
    """
    payload = json.dumps(body, separators=(",", ":")).encode()
    started = time.monotonic()
    budget_s = max(0.001, min(timeout_s, deadline_s - started))
    try:
        response = http_request(client, "POST", path, content=payload, timeout_s=budget_s, max_redirects=0,
                                headers={"Content-Type": "application/json"}, max_bytes=MAX_ANSWER_BYTES)
    except ProbeGuardError as exc:
        return Answer(status=None, kind="not-sent", latency_ms=None, message=str(exc))
    except httpx.TransportError as exc:
        return Answer(status=None, kind="no-answer", latency_ms=_ms(started), message=_transport_text(exc, budget_s))
    except HttpLimitError as exc:
        return Answer(status=None, kind="no-answer", latency_ms=_ms(started), message=f"{exc.message}; not read")
    latency = _ms(started)
    text = response.body.decode("utf-8", errors="replace")
    if response.is_redirect:
        return Answer(status=response.status, kind="no-answer", latency_ms=latency, raw_text=text,
                      message="redirect not followed (the probe only talks to the URL given)",
                      redirect_to=response.headers.get("location"))
    content_type = response.content_type
    answer = read_answer(response.status, text, latency_ms=latency,
                         sse="text/event-stream" in content_type or text.lstrip().startswith("data:"))
    return _without_token(answer, client)


def _without_token(answer: Answer, client: httpx.Client) -> Answer:
    """The answer with the bearer token cut out of its text and message (after parsing, so that a short
    token cannot break the JSON): a front door that echoes the request's headers must not put the
    token into the report."""
    scheme, _, token = client.headers.get("authorization", "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return answer
    return dataclasses.replace(
        answer,
        raw_text=answer.raw_text.replace(token, REDACTED),
        message=answer.message.replace(token, REDACTED) if answer.message else answer.message,
    )


def read_answer(status: int, text: str, *, latency_ms: float | None, sse: bool) -> Answer:
    """Classify a complete answer body (JSON or a server-sent-event stream)."""
    if sse:
        return _read_stream(status, text, latency_ms)
    if not text.strip():
        return Answer(status=status, kind="empty", latency_ms=latency_ms, raw_text=text)
    try:
        payload = parse_json(text)
    except JsonRejected as exc:
        kind: Kind = "error" if status >= 400 else "unparseable"
        message = _snippet(text) if str(exc).startswith("not JSON") else f"{exc}: {_snippet(text, 80)}"
        return Answer(status=status, kind=kind, latency_ms=latency_ms, raw_text=text, message=message)
    if isinstance(payload, list) and len(payload) == 1:
        payload = payload[0]
    runs = tuple(_id_runs(payload))
    if status >= 400 or _error_message(payload) is not None:
        return Answer(status=status, kind="error", latency_ms=latency_ms, raw_text=text, id_runs=runs,
                      message=_error_message(payload) or _snippet(text), abort_status=_error_code(payload))
    if not isinstance(payload, dict):
        return Answer(status=status, kind="unparseable", latency_ms=latency_ms, raw_text=text, id_runs=runs,
                      message=_snippet(text))
    return _read_success(status, payload, text, latency_ms, runs)


def _read_success(status: int, payload: dict[str, Any], text: str, latency_ms: float | None,
                  runs: tuple[tuple[int, ...], ...]) -> Answer:
    if "choices" in payload or "usage" in payload:  # OpenAI completion
        raw_usage, raw_choices = payload.get("usage"), payload.get("choices")
        usage: dict[str, Any] = raw_usage if isinstance(raw_usage, dict) else {}
        choices: list[Any] = raw_choices if isinstance(raw_choices, list) else []
        finish = choices[0].get("finish_reason") if choices and isinstance(choices[0], dict) else None
        finish_type = finish if isinstance(finish, str) else None
        kind: Kind = "abort" if finish_type == "abort" else ("success" if choices else "empty")
        return Answer(status=status, kind=kind, latency_ms=latency_ms, raw_text=text, id_runs=runs,
                      prompt_tokens=_count(usage.get("prompt_tokens")),
                      completion_tokens=_count(usage.get("completion_tokens")), finish_type=finish_type)
    meta = payload.get("meta_info")
    if not isinstance(meta, dict):
        return Answer(status=status, kind="empty" if not payload else "unparseable", latency_ms=latency_ms,
                      raw_text=text, id_runs=runs, message=_snippet(text))
    finish_type, abort_status, message = _finish(meta)
    kind = "abort" if finish_type == "abort" else "success"
    return Answer(status=status, kind=kind, latency_ms=latency_ms, raw_text=text, id_runs=runs,
                  prompt_tokens=_count(meta.get("prompt_tokens")),
                  completion_tokens=_count(meta.get("completion_tokens")),
                  finish_type=finish_type, abort_status=abort_status, message=message)


def _read_stream(status: int, text: str, latency_ms: float | None) -> Answer:
    """An SSE answer: error chunks, an abort finish (with its status_code), or a normal finish."""
    chunks: list[Any] = []
    for line in text.splitlines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if not data or data == "[DONE]":
            continue
        try:
            chunks.append(parse_json(data))
        except JsonRejected:
            return Answer(status=status, kind="unparseable", latency_ms=latency_ms, raw_text=text,
                          message=f"stream chunk is not JSON: {_snippet(data)}")
    runs = tuple(run for chunk in chunks for run in _id_runs(chunk))
    for chunk in chunks:
        message = _error_message(chunk)
        if message is not None:
            return Answer(status=status, kind="error", latency_ms=latency_ms, raw_text=text, id_runs=runs,
                          message=message, abort_status=_error_code(chunk))
    metas = [c["meta_info"] for c in chunks if isinstance(c, dict) and isinstance(c.get("meta_info"), dict)]
    if not metas and any(isinstance(c, dict) and ("choices" in c or "usage" in c) for c in chunks):
        return _read_openai_stream(status, chunks, text, latency_ms, runs)
    if not metas:
        return Answer(status=status, kind="empty", latency_ms=latency_ms, raw_text=text, id_runs=runs)
    last = metas[-1]
    finish_type, abort_status, message = _finish(last)
    if finish_type is None:
        return Answer(status=status, kind="empty", latency_ms=latency_ms, raw_text=text, id_runs=runs,
                      prompt_tokens=_count(last.get("prompt_tokens")),
                      message="the stream ended without a finish reason")
    return Answer(status=status, kind="abort" if finish_type == "abort" else "success", latency_ms=latency_ms,
                  raw_text=text, id_runs=runs, prompt_tokens=_count(last.get("prompt_tokens")),
                  completion_tokens=_count(last.get("completion_tokens")), finish_type=finish_type,
                  abort_status=abort_status, message=message)


def _read_openai_stream(status: int, chunks: list[Any], text: str, latency_ms: float | None,
                        runs: tuple[tuple[int, ...], ...]) -> Answer:
    """An OpenAI completion stream: choices' finish_reason, and the usage chunk (stream_options.include_usage)."""
    finish_type: str | None = None
    usage: dict[str, Any] = {}
    for chunk in chunks:
        if not isinstance(chunk, dict):
            continue
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else []:
            reason = choice.get("finish_reason") if isinstance(choice, dict) else None
            if isinstance(reason, str):
                finish_type = reason
        if isinstance(chunk.get("usage"), dict):
            usage = chunk["usage"]
    prompt_tokens, completion_tokens = _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))
    if finish_type is None:
        return Answer(status=status, kind="empty", latency_ms=latency_ms, raw_text=text, id_runs=runs,
                      prompt_tokens=prompt_tokens, message="the stream ended without a finish reason")
    return Answer(status=status, kind="abort" if finish_type == "abort" else "success", latency_ms=latency_ms,
                  raw_text=text, id_runs=runs, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                  finish_type=finish_type)


def _finish(meta: dict[str, Any]) -> tuple[str | None, int | None, str | None]:
    finish = meta.get("finish_reason")
    if isinstance(finish, dict):
        kind = finish.get("type")
        message = finish.get("message")
        return (kind if isinstance(kind, str) else None, _count(finish.get("status_code")),
                message if isinstance(message, str) else None)
    if isinstance(finish, str):
        return finish, None, None
    return None, None, None


def _error_message(payload: Any) -> str | None:
    if not isinstance(payload, dict):
        return None
    error = payload.get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    if isinstance(error, str):
        return error
    if payload.get("object") == "error" and isinstance(payload.get("message"), str):
        return str(payload["message"])
    detail = payload.get("detail")
    if isinstance(detail, str) and "meta_info" not in payload:
        return detail
    return None


def _error_code(payload: Any) -> int | None:
    if not isinstance(payload, dict):
        return None
    error = payload.get("error")
    if isinstance(error, dict):
        return _count(error.get("code"))
    return _count(payload.get("code"))


def _id_runs(node: Any) -> list[tuple[int, ...]]:
    """Every list of token ids in an answer: output_ids, token_ids, input_ids and logprob entries."""
    runs: list[tuple[int, ...]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("output_ids", "token_ids", "input_ids") and isinstance(value, list):
                ids = tuple(v for v in value if isinstance(v, int) and not isinstance(v, bool))
                if ids:
                    runs.append(ids)
            elif key in ("input_token_logprobs", "output_token_logprobs") and isinstance(value, list):
                ids = tuple(
                    entry[1] for entry in value
                    if isinstance(entry, list | tuple) and len(entry) > 1 and isinstance(entry[1], int)
                )
                if ids:
                    runs.append(ids)
            else:
                runs.extend(_id_runs(value))
    elif isinstance(node, list):
        for item in node:
            if isinstance(item, dict | list):
                runs.extend(_id_runs(item))
    return runs


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def _snippet(text: str, limit: int = 200) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _transport_text(exc: httpx.TransportError, budget_s: float) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return f"no complete answer within {budget_s:.0f} s"
    return str(exc) or type(exc).__name__


def _ms(started: float) -> float:
    return round((time.monotonic() - started) * 1000.0, 1)

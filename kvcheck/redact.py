"""Keep secrets (API keys, bearer tokens, passwords) out of every report kvcheck prints.

Manifests, engine command lines, engine logs and server answers can all carry secrets. Every
report passes through `redact_report` on its way out (kvcheck/cli.py), so no format and no
command can leak one, whatever a backend put into its details or quoted from an engine's log.

Secrets are found by value first: every secret the manifest's args and engine environment, the
options (a --token-env token) and this process's environment carry is replaced wherever it
appears. Names only decide for text: a key such as `api_key` hides its string value, while a
figure such as `kv_bytes_per_token` is a number and stays.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields, is_dataclass, replace
from typing import Any

from kvcheck.model import Finding, Report, RoleResult
from kvcheck.scrub import sub_assigned, sub_flags, sub_userinfo, userinfo_matches

REDACTED = "REDACTED"  # shell-safe, so a redacted launch command stays copy-pastable
_SECRET_NAME = re.compile(
    r"api[_-]?key|secret|passw(or)?d|credential|private[_-]?key|(^|[_-])token$|^authorization$", re.I
)
_BEARER = re.compile(r"(?P<head>\bBearer\s+)[A-Za-z0-9._~+/=\-]+", re.I)
# Well-known token shapes that may appear anywhere (Hugging Face, OpenAI-style keys).
_TOKEN_SHAPES = re.compile(r"\b(?:hf_[A-Za-z0-9]{16,}|sk-[A-Za-z0-9_\-]{16,})\b")


def is_secret_name(name: str) -> bool:
    """True for argument or variable names that hold secrets (`api_key`, `--admin-api-key`, `HF_TOKEN`)."""
    return bool(_SECRET_NAME.search(name.lstrip("-")))


# A value kvcheck only guesses is a secret (a manifest's env value, a secret-named variable of this
# process) is not searched for in free text when it is shorter than this: it would blank out ordinary
# words and figures ("true", "1"). Such values are still hidden where their name or flag shows them.
# A secret kvcheck is given (the --token-env token) is hidden whatever its length.
MIN_SECRET_CHARS = 8


def _is_secret_value(name: str, value: Any) -> bool:
    """Secrets are judged by name for text only: `kv_bytes_per_token: 1234.5` is a figure, not a key."""
    if isinstance(value, str):
        return bool(value) and is_secret_name(name)
    if isinstance(value, list | tuple):
        return bool(value) and all(isinstance(item, str) for item in value) and is_secret_name(name)
    return False


def secret_values(
    args: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None, *,
    min_chars: int = MIN_SECRET_CHARS,
) -> frozenset[str]:
    """The secret values a manifest, an engine environment or the process environment carries.

    Every string (or string in a list) held under a secret name, of `min_chars` or more.
    """
    found: set[str] = set()
    for mapping in (args or {}), (env or {}):
        for name, value in mapping.items():
            if not _is_secret_value(str(name), value):
                continue
            for item in [value] if isinstance(value, str) else value:
                if len(item.strip()) >= max(min_chars, 1):
                    found.add(item.strip())
    return frozenset(found)


# Manifest args whose text is public: model and tokenizer names, backends, dtypes, modes. Every other
# text value of a manifest's args, and every env value not named below, is taken as a secret by value
# (`DATABASE_URL=postgres://admin:PASS@db`, `GITHUB_PAT=...`): kvcheck cannot know what it holds.
PUBLIC_ARG_FIELDS = frozenset({
    "model_path", "tokenizer_path", "served_model_name", "host", "kv_cache_dtype", "dtype", "quantization",
    "attention_backend", "prefill_attention_backend", "decode_attention_backend", "mm_attention_backend",
    "sampling_backend", "grammar_backend", "disaggregation_mode", "disaggregation_transfer_backend",
    "disaggregation_ib_device", "load_format", "tokenizer_mode", "device", "schedule_policy",
    "speculative_algorithm", "speculative_draft_model_path", "moe_runner_backend", "moe_a2a_backend",
    "chat_template", "tool_call_parser", "reasoning_parser", "model_impl", "revision", "log_level",
    "log_level_http", "lora_backend", "ep_dispatch_algorithm", "hicache_storage_backend",
})
# Args named like these choose among an engine's implementations (`eplb-algorithm: deepseek`,
# `moe-runner-backend: triton`); a single plain word there is public. A URL, a path or anything with
# punctuation a credential carries is still taken as a secret.
PUBLIC_ARG_SUFFIXES = ("_backend", "_algorithm", "_mode", "_policy", "_parser", "_dtype", "_format", "_impl",
                       "_strategy", "_method", "_level", "_type", "_kernel")
_CHOICE_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_.\-]{0,63}")
PUBLIC_ENV_PREFIXES = ("CUDA_", "NCCL_", "NVIDIA_", "TORCH_", "PYTORCH_", "OMP_", "GLOO_", "UCX_", "NVSHMEM_",
                       "TRITON_", "SGL_", "SGLANG_", "FLASHINFER_", "MC_", "HIP_", "ROCM_", "HSA_")
PUBLIC_ENV_NAMES = frozenset({"PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "HOME", "HF_HOME", "HF_HUB_OFFLINE",
                              "TRANSFORMERS_CACHE", "HF_HUB_ENABLE_HF_TRANSFER", "TZ", "LANG", "LC_ALL"})
_PLAIN = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?|true|false|none|null|yes|no|on|off", re.I)
# scheme://user:password@host: the userinfo of any URL (even one that does not parse)


def _texts(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple):
        return [item for item in value if isinstance(item, str)]
    return []


def manifest_secrets(
    args: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    *,
    public_fields: Iterable[str] = (),
) -> frozenset[str]:
    """Every value of a manifest's args and engine env kvcheck must not print (secret_values, plus by value).

    By value: an env value that is not a plain number or boolean, unless its name is a known public one
    (CUDA_*, NCCL_*, HF_HOME, ...); an arg's text that is not a plain number, unless its field is a known
    public one (model_path, kv_cache_dtype, ...); and the userinfo of every URL either of them holds.
    SGLANG_* names are public only when is_secret_name says nothing (SGLANG_API_KEY stays secret).
    `public_fields` adds args the engine knows are public words (a value from the flag's choices).
    """
    public_args = PUBLIC_ARG_FIELDS | frozenset(public_fields)
    # what the manifest hands the engine under a secret name (api-key, HF_TOKEN) is a secret kvcheck was
    # given: hidden whatever its length, unless it is a plain figure or boolean
    given = {value for value in secret_values(args, env, min_chars=1) if not _PLAIN.fullmatch(value)}
    found: set[str] = set()
    for name, value in (env or {}).items():
        public = (name in PUBLIC_ENV_NAMES or name.startswith(PUBLIC_ENV_PREFIXES)) and not is_secret_name(name)
        found.update(text.strip() for text in _texts(value) if not public and not _PLAIN.fullmatch(text.strip()))
    for name, value in (args or {}).items():
        if str(name) in public_args:
            continue
        word_field = str(name).endswith(PUBLIC_ARG_SUFFIXES)
        found.update(
            text.strip()
            for text in _texts(value)
            if not _PLAIN.fullmatch(text.strip()) and not (word_field and _CHOICE_WORD.fullmatch(text.strip()))
        )
    for mapping in (args or {}), (env or {}):
        for value in mapping.values():
            for text in _texts(value):
                found.update(m["userinfo"] for m in userinfo_matches(text))
    return frozenset(given | {item for item in found if len(item) >= MIN_SECRET_CHARS})


# The tokens kvcheck itself sends (to the Hugging Face Hub, for a model config): given, so hidden at any length.
SENT_TOKEN_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")


def environment_secrets(environ: Mapping[str, str] = os.environ) -> frozenset[str]:
    """The values of this process's secret-named environment variables (HF_TOKEN, *_API_KEY, ...): the
    tokens kvcheck sends whatever their length, the others from MIN_SECRET_CHARS."""
    sent = {environ[name].strip() for name in SENT_TOKEN_VARIABLES if environ.get(name, "").strip()}
    return secret_values(env=environ) | sent


def _replace_values(text: str, secrets: Sequence[str]) -> str:
    for value in secrets:  # longest first, so a secret containing another is hidden whole
        if value in text:
            text = text.replace(value, REDACTED)
    return text


def _ordered(secrets: Iterable[str]) -> tuple[str, ...]:
    """The values to search for, longest first (so a secret containing another is hidden whole).

    No length filter here: the functions that guess secrets (secret_values, manifest_secrets) keep only
    values of MIN_SECRET_CHARS and longer, and a secret kvcheck was given (a --token-env token, put in
    Report.secrets) is hidden whatever its length: a 5-character token echoed in a reason phrase or a
    redirect path once reached the report."""
    return tuple(sorted({v for v in secrets if v}, key=lambda v: (-len(v), v)))


def given_secrets(token_env: str | None, environ: Mapping[str, str] = os.environ) -> frozenset[str]:
    """What stderr must not show: the token --token-env names (whatever its length) and the process
    environment's secrets (environment_secrets)."""
    token = environ.get(token_env, "").strip() if token_env else ""
    return environment_secrets(environ) | ({token} if token else set())


def redact_args(args: Mapping[str, Any], secrets: Iterable[str] = ()) -> dict[str, Any]:
    """The args with every secret value replaced: by name for strings, by value everywhere."""
    known = _ordered(secrets)
    return {key: _value(str(key), value, known) for key, value in args.items()}


def redact_argv(argv: Sequence[str], secrets: Iterable[str] = ()) -> list[str]:
    """An argv with the values of secret flags (`--api-key X Y`, `--api-key=X`) and known secrets hidden.

    A secret flag may take several values: every word up to the next option is hidden.
    """
    known = _ordered(secrets)
    out: list[str] = []
    hiding = False
    for word in argv:
        if hiding and not word.startswith("-"):
            out.append(REDACTED)
            continue
        hiding = False
        if word.startswith("--") and "=" in word and is_secret_name(word.split("=", 1)[0]):
            out.append(word.split("=", 1)[0] + "=" + REDACTED)
        elif word.startswith("--") and is_secret_name(word):
            out.append(word)
            hiding = True
        else:
            out.append(redact_text(word, known))
    return out


def redact_command(command: str, secrets: Iterable[str] = ()) -> str:
    """A shell command line with the values of secret flags hidden."""
    try:
        words = shlex.split(command)
    except ValueError:
        return REDACTED  # unbalanced quotes: cannot tell where a secret ends, show nothing
    return shlex.join(redact_argv(words, secrets))


# `FILE:LINE:` or `FILE:LINE:COL:` opening a line (an error's location): a path whose last part reads like a
# secret's name (`/etc/passwd:3:`) is not `passwd: 3`. A path or a file name (a `/` or a `.` in it), no `@`
# (a URL's userinfo is still scrubbed), no `=` or quotes (an assignment is still one).
_LOCATION = re.compile(r"^[^\s:@='\"/.]*[/.][^\s:@='\"]*(?::\d+){1,2}(?=: )", re.M)


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """Free text (a quoted engine log line, an error message) with secret values hidden."""
    kept = _ordered(secrets)
    pieces, last = [], 0
    for place in _LOCATION.finditer(text):
        pieces.append(_redact_text(text[last : place.start()], kept))
        pieces.append(_replace_values(place[0], kept))  # a known secret is hidden even in a path
        last = place.end()
    pieces.append(_redact_text(text[last:], kept))
    return "".join(pieces)


def _redact_text(text: str, secrets: Sequence[str]) -> str:
    text = _replace_values(text, secrets)
    text = sub_assigned(text, _assigned)  # linear scanners (kvcheck/scrub.py): every line passes here
    text = sub_flags(text, lambda flag, sep, value: f"{flag}{sep}{_quoted(value)}")
    text = _BEARER.sub(lambda m: f"{m['head']}{REDACTED}", text)
    text = sub_userinfo(text, lambda scheme: f"{scheme}{REDACTED}@")  # user:password@ of any URL
    return _TOKEN_SHAPES.sub(REDACTED, text)


def _assigned(key: str, sep: str, value: str) -> str:
    """`api_key=x` hides x; prose such as `--token-env MY_TOKEN: the token holds ...` stays readable."""
    if ":" in sep and _PROSE_WORD.fullmatch(value):
        return f"{key}{sep}{value}"
    return f"{key}{sep}{_quoted(value)}"


# After `NAME: ` a bare lowercase word is a sentence going on, not a value (known secrets are hidden by value)
_PROSE_WORD = re.compile(r"[a-z]{1,7}")


def _quoted(value: str) -> str:
    if value[:1] in ("'", '"') and value[-1:] == value[:1] and len(value) >= 2:
        return value[0] + REDACTED + value[0]
    return REDACTED


def _value(name: str, value: Any, secrets: Sequence[str]) -> Any:
    """One keyed value: hidden when its name says secret and it is text, else scrubbed inside."""
    if _is_secret_value(name, value):
        return REDACTED if isinstance(value, str) else type(value)(REDACTED for _ in value)
    return redact_value(value, secrets)


def redact_value(value: Any, secrets: Iterable[str] = ()) -> Any:
    """Any JSON-like value: text under secret names hidden, argv-like lists and strings scrubbed.

    Numbers, booleans and None are never touched, whatever their key is called.
    """
    known = secrets if isinstance(secrets, tuple) else _ordered(secrets)
    if isinstance(value, Mapping):
        return {key: _value(str(key), item, known) for key, item in value.items()}
    if isinstance(value, list | tuple):
        if value and all(isinstance(item, str) for item in value):
            scrubbed = redact_argv(value, known)
            return scrubbed if isinstance(value, list) else tuple(scrubbed)
        return type(value)(redact_value(item, known) for item in value)
    if isinstance(value, str):
        return redact_text(value, known)
    return value


def _scrub_typed(value: Any, secrets: Sequence[str]) -> Any:
    """A typed value (plan, probe rows) with every text in it scrubbed; numbers and flags stay."""
    if isinstance(value, str):
        return redact_text(value, secrets)
    if is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: _scrub_typed(getattr(value, f.name), secrets) for f in fields(value) if f.init}
        return replace(value, **changes)
    if isinstance(value, tuple):
        return tuple(_scrub_typed(item, secrets) for item in value)
    return value


def _finding(item: Finding, secrets: Sequence[str]) -> Finding:
    return replace(
        item,
        message=redact_text(item.message, secrets),
        hint=redact_text(item.hint, secrets) if item.hint else item.hint,
    )


def _role(role: RoleResult, secrets: Sequence[str]) -> RoleResult:
    return replace(
        role,
        argv=tuple(redact_argv(role.argv, secrets)) if role.argv is not None else None,
        details=redact_value(dict(role.details), secrets),
        engine_version=redact_text(role.engine_version, secrets) if role.engine_version else role.engine_version,
        fit_hints=_scrub_typed(role.fit_hints, secrets),
        plan=_scrub_typed(role.plan, secrets),
        plan_error=_scrub_typed(role.plan_error, secrets),
        probe=_scrub_typed(role.probe, secrets),
    )


def redact_report(report: Report, environ: Mapping[str, str] = os.environ) -> Report:
    """The report with every secret hidden: the values the manifest, the options and the environment
    carry (Report.secrets, secret-named variables), wherever they appear, and whatever looks like one
    (secret flags and keys, bearer tokens, well-known key shapes) in argv, details, texts and findings."""
    secrets = _ordered(report.secrets | environment_secrets(environ))
    return replace(
        report,
        roles=tuple(_role(role, secrets) for role in report.roles),
        findings=tuple(_finding(item, secrets) for item in report.findings),
        suppressions=tuple(replace(item, finding=_finding(item.finding, secrets),
                                   reason=redact_text(item.reason, secrets)) for item in report.suppressions),
        source=redact_text(report.source, secrets) if report.source else report.source,
        secrets=frozenset(),
    )

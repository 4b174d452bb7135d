"""Every option of `kvcheck probe`, validated once so that lower layers can trust them."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import httpx

from kvcheck.engines import get_engine
from kvcheck.errors import InputError
from kvcheck.http import no_secrets, shown_input, token_problem, url_problem

# Defaults sized so that one run is a small, bounded load (docs/probe.md gives the exact figures).
DEFAULT_MAX_REQUESTS = 64
DEFAULT_MAX_UPLOAD_MIB = 512  # a 1M-token window's whole plan sends about 150 MiB of token ids
# The longest prompt the probe builds, tokens: about 10 MB of JSON token ids. Prompts aim at the smaller
# of what the server claims and what --context-length promises, and never past this.
MAX_PROMPT_TOKENS = 2**21
DEFAULT_CONCURRENCY = 4
DEFAULT_RATE_PER_S = 2.0
DEFAULT_MAX_DURATION_S = 1800.0
DEFAULT_REQUEST_TIMEOUT_S = 600.0
DEFAULT_TENANTS = 4
DEFAULT_ROUNDS = 2
DEFAULT_TOKEN_ID = 1000  # a dry run's placeholder filler, and --vocab-size's default filler (when it is below)
DEFAULT_MAX_NEW_TOKENS = 16
PATTERN_SPAN = 4096  # tenant patterns use ids in [token_id + 1, token_id + PATTERN_SPAN]
MAX_CONCURRENCY = 64
MAX_TOKEN_ID = 2**31 - 1 - PATTERN_SPAN
MAX_VOCAB_SIZE = 2**31 - 1


@dataclass(frozen=True)
class ProbeOptions:
    """What `kvcheck probe` was asked to do; `validate()` raises InputError (exit 2) on bad values."""

    url: str
    context_length: int | None = None  # the window promised to clients, tokens (else the server's)
    pool_tokens: int | None = None  # the pool where the front door states none, or a smaller one it judges
    max_requests: int = DEFAULT_MAX_REQUESTS  # every request sent, GETs included
    max_upload_mib: int = DEFAULT_MAX_UPLOAD_MIB  # request bodies sent, all requests together, MiB
    concurrency: int = DEFAULT_CONCURRENCY
    rate_per_s: float = DEFAULT_RATE_PER_S  # request starts per second, all requests together
    max_duration_s: float = DEFAULT_MAX_DURATION_S  # wall clock for the whole run
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S  # one request, bounded by what is left
    tenants: int = DEFAULT_TENANTS  # synthetic tenants for the isolation check (0: skip it)
    rounds: int = DEFAULT_ROUNDS  # isolation rounds per tenant
    token_id: int | None = None  # filler token id of every prompt; None: an id the tokenizer emits
    vocab_size: int | None = None  # the model's vocabulary as the user states it (ids below it are in range)
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS  # asked for on over-long and short prompts
    text_prompts: bool | None = None  # tenant text markers; None: when /server_info shows a tokenizer
    openai: bool = True  # also probe /v1/completions with token-array prompts
    stream: bool = True  # also probe streaming /generate at the bound
    model: str | None = None  # model name for /v1/completions (else /server_info or /v1/models)
    dry_run: bool = False
    ca_bundle: str | None = None
    insecure: bool = False
    token_env: str | None = None
    seed: int | None = None  # markers and patterns; None: fresh random ones every run
    strict: bool = False
    engine: str | None = None  # the front door's engine; None: the first engine that reads its answers

    def validate(self) -> None:
        """Every problem in one message, so a user fixes the command line once."""
        problems: list[str] = []
        _check_url(self.url, problems)
        self._check_counts(problems)
        self._check_durations(problems)
        self._check_token_figures(problems)
        self._check_credentials(problems)
        self._check_engine(problems)
        if self.dry_run and (self.context_length is None or self.pool_tokens is None):
            problems.append(
                "--dry-run sends nothing, not even to /server_info: give --context-length and --pool "
                "so that the plan's prompt lengths can be computed"
            )
        if problems:
            raise InputError("; ".join(problems) if len(problems) == 1 else "\n".join(problems))

    def _check_counts(self, problems: list[str]) -> None:
        """Integer options: request, upload and load bounds, tenants and the filler token id."""
        counts: tuple[tuple[str, object, int], ...] = (
            ("--max-requests", self.max_requests, 1),
            ("--max-upload-mib", self.max_upload_mib, 1),
            ("--concurrency", self.concurrency, 1),
            ("--rounds", self.rounds, 1),
            ("--max-new-tokens", self.max_new_tokens, 1),
            ("--tenants", self.tenants, 0),
            ("--token-id", self.token_id, 0),
            ("--vocab-size", self.vocab_size, 2),
        )
        for name, value, low in counts:
            if value is None and name in ("--token-id", "--vocab-size"):
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                problems.append(f"{name} must be an integer of at least {low}, got {value!r}")
        if isinstance(self.concurrency, int) and self.concurrency > MAX_CONCURRENCY:
            problems.append(f"--concurrency is at most {MAX_CONCURRENCY}, got {self.concurrency}")
        if isinstance(self.token_id, int) and self.token_id > MAX_TOKEN_ID:
            problems.append(f"--token-id is at most {MAX_TOKEN_ID}, got {self.token_id}")
        if isinstance(self.vocab_size, int) and self.vocab_size > MAX_VOCAB_SIZE:
            problems.append(f"--vocab-size is at most {MAX_VOCAB_SIZE}, got {self.vocab_size}")
        if (isinstance(self.token_id, int) and isinstance(self.vocab_size, int)
                and not isinstance(self.token_id, bool) and self.token_id >= self.vocab_size):
            problems.append(f"--token-id {self.token_id} is not below --vocab-size {self.vocab_size}: "
                            "the id would kill the server")
        if self.tenants == 1:
            problems.append("--tenants must be 0 (skip the isolation check) or at least 2")

    def _check_durations(self, problems: list[str]) -> None:
        durations: tuple[tuple[str, object], ...] = (
            ("--rate", self.rate_per_s),
            ("--max-duration", self.max_duration_s),
            ("--request-timeout", self.request_timeout_s),
        )
        for name, value in durations:
            if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                problems.append(f"{name} must be a positive number, got {value!r}")

    def _check_token_figures(self, problems: list[str]) -> None:
        """--context-length and --pool: token counts a server could hold and the probe could send."""
        figures: tuple[tuple[str, object], ...] = (
            ("--context-length", self.context_length),
            ("--pool", self.pool_tokens),
        )
        known = self.engine is None or self.engine in _engine_names()
        most = get_engine(self.engine).max_token_figure if self.engine and known else get_engine().max_token_figure
        for name, value in figures:
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 16):
                problems.append(f"{name} must be a token count of at least 16, got {value!r}")
            elif isinstance(value, int) and value > most:
                problems.append(f"{name} {value} is more tokens than any server can hold (at most {most})")
        if isinstance(self.context_length, int) and most >= self.context_length > MAX_PROMPT_TOKENS:
            problems.append(f"--context-length {self.context_length} is beyond the longest prompt the probe sends "
                            f"({MAX_PROMPT_TOKENS:,} tokens)")

    def _check_engine(self, problems: list[str]) -> None:
        from kvcheck.engines import engine_names

        if self.engine is None:
            return
        names = engine_names()
        if self.engine not in names:
            problems.append(f"--engine {self.engine!r} is not a known engine (known: {', '.join(names)})")
        elif get_engine(self.engine).probe_front_door() is None:
            problems.append(f"--engine {self.engine}: kvcheck probe cannot talk to that engine's front door")

    def _check_credentials(self, problems: list[str]) -> None:
        """TLS options and the bearer token's environment variable."""
        if self.insecure and self.ca_bundle:
            problems.append("--insecure and --ca-bundle contradict each other; give one")
        if self.ca_bundle and not Path(self.ca_bundle).exists():
            problems.append(f"--ca-bundle {self.ca_bundle} does not exist")
        if self.token_env is not None and not os.environ.get(self.token_env):
            problems.append(f"--token-env {self.token_env}: that environment variable is not set or empty")
        elif self.token_env is not None:
            problem = token_problem(self.token_env, os.environ[self.token_env])
            if problem is not None:
                problems.append(problem)

    @property
    def token(self) -> str | None:
        """The bearer token, read from the environment only when needed (never stored in a report)."""
        return os.environ.get(self.token_env) if self.token_env else None

    @property
    def verify(self) -> bool | str:
        """TLS verification for httpx: a CA bundle path, True (system CAs) or False (--insecure)."""
        if self.insecure:
            return False
        return self.ca_bundle or True


def _engine_names() -> list[str]:
    from kvcheck.engines import engine_names

    return engine_names()


def _check_url(url: str, problems: list[str]) -> None:
    shown = repr(shown_input(url))  # a rejected URL's credentials never reach stderr
    try:
        parsed = httpx.URL(url.strip())
    except (httpx.InvalidURL, TypeError, UnicodeError) as exc:
        problems.append(f"{shown} is not a valid URL: {no_secrets(str(exc), url)}")
        return
    if parsed.userinfo:  # first, so that no other message echoes the credentials
        problems.append("credentials in the URL are not accepted; pass --token-env NAME")
    elif (problem := url_problem(parsed)) is not None:  # before .host, which raises on bad punycode
        problems.append(f"{shown} is not a usable URL: {problem}")
    elif parsed.scheme not in ("http", "https") or not parsed.host:
        problems.append(f"{shown}: only http:// and https:// URLs of a server are probed")
    elif parsed.port is not None and not 1 <= parsed.port <= 65535:
        problems.append(f"{shown}: port {parsed.port} is not a TCP port (1-65535)")
    elif parsed.query or parsed.fragment:
        problems.append(f"{shown}: the URL must not carry a query or fragment")

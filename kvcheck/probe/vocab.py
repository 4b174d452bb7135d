"""The token ids the probe may send: only ids it can prove lie inside the model's vocabulary.

An id at or above the vocabulary kills SGLang's scheduler (IndexError in the embedding) and the
server with it, so the probe never sends an id it has not proven in range. Proofs, in order:

1. The deployment's own tokenizer: `POST /v1/tokenize` (SGLang's server and sglang-router both serve
   it) of a fixed list of common words. Every id it returns is one the tokenizer emits for plain text,
   so it is inside the vocabulary. The filler of every token prompt is the id of a word the tokenizer
   turns into exactly one token each time it is repeated; the tenants' patterns are drawn from the
   other ids. The same word, repeated, builds text prompts of a known token count for a front door
   that refuses token-id prompts (sglang-router's /v1/completions answers 422 to them).
2. `--vocab-size N`, the model's vocabulary as the user states it: ids below N.
3. The model's config.json, when the path the server names (`/model_info` or `/get_model_info`
   `model_path`) is a folder on this machine: its `vocab_size`.

With none of these the probe sends no generation request and reports KV322 (exit 3). An explicit
`--token-id` must be proven in range too (below a known vocabulary size, or at most the largest id
the tokenizer emitted).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from kvcheck.errors import CheckError
from kvcheck.http import HttpLimitError
from kvcheck.http import request as http_request
from kvcheck.io.jsontext import JsonRejected, parse_json
from kvcheck.io.jsontext import loads as json_loads
from kvcheck.probe.options import DEFAULT_TOKEN_ID, PATTERN_SPAN, ProbeOptions
from kvcheck.probe.transport import ProbeGuardError

if TYPE_CHECKING:
    from kvcheck.engines.base import ProbeFrontDoor

TOKENIZE = "/v1/tokenize"
MODEL_INFO_PATHS = ("/model_info", "/get_model_info")  # 0.5.23's spelling, then the older one (the router's)
# Words whose ids become the tenants' patterns: common English, so every tokenizer knows most of them.
WORDS = (
    "time year people way day man thing woman life child world school state family student group "
    "country problem hand part place case week company system program question work government number "
    "night point home water room mother area money story fact month lot right study book eye job word "
    "business issue side kind head house service friend father power hour game line end member law car "
    "city community name president team minute idea kid body information back parent face others level "
    "office door health person art war history party result change morning reason research girl guy "
    "moment air teacher force education foot boy age policy music market sense nation plan college "
    "interest death experience effect class control care field development role effort rate heart drug "
    "show leader light voice wife police mind price report decision son view relationship town road arm"
)
# Words tried as the filler, in order: the first the tokenizer turns into one more token per repetition wins.
UNITS = (" the", " a", " and", " of", " time")
UNIT_SAMPLES = (8, 16)  # repetitions tokenized to prove a unit's count is exactly one token each
MIN_CANDIDATES = 32  # ids needed for the tenants' patterns (8 ids each, drawn at random)
MAX_MODEL_CONFIG_BYTES = 4 * 2**20
MAX_TEXT_OVERHEAD = 8  # tokens a server may add to a text prompt (BOS and the like); more is not credible


class VocabularyUnknown(CheckError):
    """No proof that the probe's token ids lie inside the model's vocabulary: nothing is sent (KV322).

    `unreachable`: the front door gave no HTTP answer (or only a redirect) to POST /v1/tokenize, so the
    cause is the path to it (KV320), not the vocabulary.
    """

    def __init__(self, message: str, *, hint: str | None = None, unreachable: bool = False) -> None:
        super().__init__(message, hint=hint)
        self.unreachable = unreachable


@dataclass(frozen=True)
class Vocabulary:
    """Token ids proven in range, where the proof came from, and how to build counted text prompts."""

    source: str
    filler: int  # the id every token prompt repeats
    candidates: tuple[int, ...]  # ids for the owners' patterns (never the filler)
    unit: str | None = None  # a word the tokenizer turns into one token per repetition
    size: int | None = None  # the vocabulary size, when stated (--vocab-size, config.json)
    tokenizer: bool = False  # the deployment's own tokenizer answered: the front door takes text prompts

    def describe(self) -> str:
        ids = sorted({self.filler, *self.candidates})
        return (f"token ids proven in range by {self.source}: filler {self.filler}, patterns from "
                f"{len(self.candidates)} ids in [{ids[0]}, {ids[-1]}]")


def placeholder_vocabulary(options: ProbeOptions) -> Vocabulary:
    """For a dry run, which sends nothing: the ids a plan lists are placeholders (a live run proves its own)."""
    token_id = options.token_id if options.token_id is not None else DEFAULT_TOKEN_ID
    return Vocabulary(source="placeholders (dry run)", filler=token_id,
                      candidates=tuple(range(token_id + 1, token_id + 1 + PATTERN_SPAN)))


def learn_vocabulary(client: httpx.Client, options: ProbeOptions, *, model: str | None,
                     timeout_s: float, front: ProbeFrontDoor | None = None) -> tuple[Vocabulary, list[str]]:
    """The ids the probe may send, and notes on how they were proven; raises VocabularyUnknown.

    `front` names the engine's tokenizer endpoint and model-path endpoints (None: SGLang's).
    """
    notes: list[str] = []
    tokenize = front.tokenize_path if front is not None else TOKENIZE
    if front is not None and not front.tokenize_batch:
        vocab = _from_single_tokenizer(client, tokenize, model, timeout_s, notes)
    else:
        vocab = _from_tokenizer(client, model, timeout_s, notes, tokenize)
    if vocab is None and notes and notes[-1].startswith(_UNREACHABLE_NOTE):
        raise VocabularyUnknown(f"{notes[-1][len(_UNREACHABLE_NOTE):]}; nothing else was sent", unreachable=True)
    size, source = options.vocab_size, f"--vocab-size {options.vocab_size}"
    if size is None and vocab is None:
        paths = front.model_info_paths if front is not None else MODEL_INFO_PATHS
        size, source = _size_from_model_config(client, timeout_s, notes, paths)
    if vocab is not None:
        if size is not None:
            vocab = _within(vocab, size, notes)
    elif size is not None:
        vocab = _from_size(size, options, source)
    else:
        raise VocabularyUnknown(
            "cannot probe safely: no proof that token ids lie inside the model's vocabulary ("
            + "; ".join(notes) + "); an id at or above it kills the server, so nothing was sent",
            hint=f"give --vocab-size N (the model's vocab_size from its config.json), or probe a front door "
            f"that serves POST {tokenize} (a server with its tokenizer, or a router that has one)",
        )
    return _with_token_id(vocab, options), notes


def _from_single_tokenizer(client: httpx.Client, path: str, model: str | None, timeout_s: float,
                           notes: list[str]) -> Vocabulary | None:
    """Ids a tokenizer that takes one prompt per POST (vLLM's /tokenize) emits for WORDS: one POST.

    Its token prompts go as ids (vLLM's /v1/completions takes them), so no counted-text unit is needed:
    the filler is the id the word list uses most (the smallest of those on a tie), the patterns the rest.
    """
    body: dict[str, Any] = {"prompt": WORDS, "add_special_tokens": False}
    if model:
        body["model"] = model
    payload = _post_json(client, path, body, timeout_s, notes)
    if payload is None:
        return None
    tokens = payload.get("tokens") if isinstance(payload, dict) else None
    if not _is_id_lists([tokens], 1) or not tokens:
        notes.append(f"POST {path} answered without a list of token ids")
        return None
    assert isinstance(tokens, list)
    filler = min(set(tokens), key=lambda t: (-tokens.count(t), t))
    candidates = tuple(sorted(set(tokens) - {filler}))
    if len(candidates) < MIN_CANDIDATES:
        notes.append(f"POST {path} gave {len(candidates)} distinct ids for the word list, fewer than the "
                     f"{MIN_CANDIDATES} the patterns need")
        return None
    return Vocabulary(source=f"the deployment's tokenizer (POST {path})", filler=filler, candidates=candidates,
                      tokenizer=True)


def _from_tokenizer(client: httpx.Client, model: str | None, timeout_s: float,
                    notes: list[str], path: str = TOKENIZE) -> Vocabulary | None:
    """Ids the deployment's tokenizer emits for WORDS, and the first unit word that counts one token each."""
    prompts = [WORDS] + [unit * n for unit in UNITS for n in UNIT_SAMPLES]
    body: dict[str, Any] = {"prompt": prompts, "add_special_tokens": False}
    if model:
        body["model"] = model  # sglang-router finds the tokenizer by model name
    payload = _post_json(client, path, body, timeout_s, notes)
    if payload is None:
        return None
    tokens = payload.get("tokens") if isinstance(payload, dict) else None
    if not _is_id_lists(tokens, len(prompts)):
        notes.append(f"POST {path} answered without {len(prompts)} lists of token ids")
        return None
    assert isinstance(tokens, list)
    unit, filler = _linear_unit(tokens[1:])
    if unit is None or filler is None:
        notes.append(f"POST {path}: none of the words {', '.join(repr(u) for u in UNITS)} is one token "
                     "per repetition")
        return None
    candidates = tuple(sorted(set(tokens[0]) - {filler}))
    if len(candidates) < MIN_CANDIDATES:
        notes.append(f"POST {path} gave {len(candidates)} distinct ids for the word list, fewer than the "
                     f"{MIN_CANDIDATES} the patterns need")
        return None
    return Vocabulary(source=f"the deployment's tokenizer (POST {path})", filler=filler,
                      candidates=candidates, unit=unit, tokenizer=True)


def _linear_unit(samples: Sequence[list[int]]) -> tuple[str | None, int | None]:
    """The first unit each of whose samples is one and the same prefix, then its repetition count of one id.

    A byte-level BPE turns ' the' x 8 into 8 ids; a SentencePiece tokenizer may put a lone '▁' first
    (its dummy prefix). Either way each repetition adds exactly one token, which is what counted text
    prompts need; what comes before is measured on the server (the text control's usage).
    """
    for i, unit in enumerate(UNITS):
        runs = samples[i * len(UNIT_SAMPLES):(i + 1) * len(UNIT_SAMPLES)]
        longest, most = runs[-1], UNIT_SAMPLES[-1]
        if not longest or len(longest) < most:
            continue
        token, prefix = longest[-1], longest[:len(longest) - most]
        if all(run == prefix + [token] * n for run, n in zip(runs, UNIT_SAMPLES, strict=True)):
            return unit, token
    return None, None


def _is_id_lists(value: Any, count: int) -> bool:
    return (isinstance(value, list) and len(value) == count and all(
        isinstance(run, list) and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in run)
        for run in value))


_UNREACHABLE_NOTE = "unreachable: "


def _post_json(client: httpx.Client, path: str, body: dict[str, Any], timeout_s: float,
               notes: list[str]) -> Any:
    content = json.dumps(body, separators=(",", ":")).encode()
    try:
        response = http_request(client, "POST", path, content=content, timeout_s=timeout_s, max_redirects=0,
                                headers={"Content-Type": "application/json"})
    except ProbeGuardError as exc:
        notes.append(f"POST {path} not sent: {exc}")
        return None
    except httpx.TransportError as exc:
        notes.append(f"{_UNREACHABLE_NOTE}POST {path}: {exc or type(exc).__name__}")
        return None
    except HttpLimitError as exc:
        notes.append(f"POST {path}: {exc.message}")
        return None
    if response.is_redirect:
        notes.append(f"{_UNREACHABLE_NOTE}POST {path}: HTTP {response.status}: redirect not followed (the probe "
                     "only talks to the URL given)")
        return None
    if response.status != 200:
        notes.append(f"POST {path} answered HTTP {response.status}")
        return None
    try:
        return parse_json(response.body)
    except JsonRejected as exc:
        notes.append(f"POST {path}: {exc}")
        return None


def _size_from_model_config(client: httpx.Client, timeout_s: float, notes: list[str],
                            paths: Sequence[str] = MODEL_INFO_PATHS) -> tuple[int | None, str]:
    """vocab_size from config.json of the model path the server names, when that folder is on this machine."""
    path = _model_path(client, timeout_s, notes, paths)
    if path is None:
        return None, ""
    size = _read_vocab_size(path, notes)
    return size, f"vocab_size {size} in {Path(path) / 'config.json'} (the model path the server names)"


def _read_vocab_size(path: str, notes: list[str]) -> int | None:
    config = Path(path) / "config.json"
    try:
        if not Path(path).is_absolute() or not config.is_file():
            notes.append(f"the model path {path!r} is not a folder with config.json on this machine")
            return None
        if config.stat().st_size > MAX_MODEL_CONFIG_BYTES:
            notes.append(f"{config} is larger than {MAX_MODEL_CONFIG_BYTES // 2**20} MiB; not read")
            return None
        data = json_loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        notes.append(f"{config}: {exc}")
        return None
    size = _vocab_size(data)
    if size is None:
        notes.append(f"{config} states no vocab_size")
        return None
    return size


def _vocab_size(data: Any) -> int | None:
    if not isinstance(data, dict):
        return None
    for holder in (data, data.get("text_config"), data.get("llm_config")):
        if isinstance(holder, dict):
            size = holder.get("vocab_size")
            if isinstance(size, int) and not isinstance(size, bool) and size > 0:
                return size
    return None


def _model_path(client: httpx.Client, timeout_s: float, notes: list[str],
                paths: Sequence[str] = MODEL_INFO_PATHS) -> str | None:
    """The model path the first of `paths` that answers names: `model_path` (SGLang's /model_info), or
    the first model's `root` in a /v1/models list (vLLM's)."""
    for path in paths:
        try:
            response = http_request(client, "GET", path, timeout_s=timeout_s, max_redirects=0)
        except ProbeGuardError as exc:
            notes.append(f"GET {path} not sent: {exc}")
            return None
        except (httpx.TransportError, HttpLimitError) as exc:
            notes.append(f"GET {path}: {getattr(exc, 'message', None) or exc or type(exc).__name__}")
            return None
        if response.status == 404:
            continue
        try:
            payload = parse_json(response.body)
        except JsonRejected:
            payload = None
        model_path = payload.get("model_path") if isinstance(payload, dict) and response.status == 200 else None
        if model_path is None and isinstance(payload, dict) and response.status == 200:
            data = payload.get("data")
            first = data[0] if isinstance(data, list) and data else None
            model_path = first.get("root") if isinstance(first, dict) else None
        if isinstance(model_path, str) and model_path:
            return model_path
        notes.append(f"GET {path} answered HTTP {response.status} without a model_path")
        return None
    notes.append(f"the front door serves neither {' nor '.join(paths)}" if len(paths) > 1
                 else f"the front door does not serve {paths[0]}")
    return None


def _from_size(size: int, options: ProbeOptions, source: str) -> Vocabulary:
    """Ids below a stated vocabulary size: the filler and, above it, the pattern ids (below it if need be)."""
    filler = options.token_id if options.token_id is not None else min(DEFAULT_TOKEN_ID, size // 2)
    if filler >= size:
        raise VocabularyUnknown(
            f"cannot probe safely: --token-id {filler} is not below the vocabulary size {size} ({source})",
            hint=f"give a --token-id below {size}, or leave it out",
        )
    above = range(filler + 1, min(size, filler + 1 + PATTERN_SPAN))
    below = range(max(1, filler - PATTERN_SPAN), filler)
    candidates = tuple(above) if len(above) >= MIN_CANDIDATES else tuple(below) + tuple(above)
    if len(candidates) < MIN_CANDIDATES:
        raise VocabularyUnknown(
            f"cannot probe safely: a vocabulary of {size} ids ({source}) leaves fewer than {MIN_CANDIDATES} ids "
            "for the tenants' patterns",
            hint="give the model's real vocab_size with --vocab-size",
        )
    return Vocabulary(source=source, filler=filler, candidates=candidates, size=size)


def _within(vocab: Vocabulary, size: int, notes: list[str]) -> Vocabulary:
    """The tokenizer's ids that also lie below a stated size (a tokenizer larger than the model is possible)."""
    kept = tuple(c for c in vocab.candidates if c < size)
    if vocab.filler >= size or len(kept) < MIN_CANDIDATES:
        raise VocabularyUnknown(
            f"cannot probe safely: the tokenizer emits ids up to {max(vocab.candidates + (vocab.filler,))}, "
            f"beyond the stated vocabulary size {size}",
            hint="check --vocab-size against the model's config.json",
        )
    if len(kept) < len(vocab.candidates):
        notes.append(f"{len(vocab.candidates) - len(kept)} tokenizer ids at or above vocabulary size {size} dropped")
    return Vocabulary(source=vocab.source, filler=vocab.filler, candidates=kept, unit=vocab.unit, size=size,
                      tokenizer=vocab.tokenizer)


def _with_token_id(vocab: Vocabulary, options: ProbeOptions) -> Vocabulary:
    """An explicit --token-id replaces the filler, once it is proven in range."""
    token_id = options.token_id
    if token_id is None or token_id == vocab.filler:
        return vocab
    bound = vocab.size if vocab.size is not None else max(vocab.candidates) + 1
    if token_id >= bound:
        stated = (f"the vocabulary size {vocab.size}" if vocab.size is not None
                  else f"the largest id the tokenizer emitted ({bound - 1})")
        raise VocabularyUnknown(
            f"cannot probe safely: --token-id {token_id} is not proven inside the vocabulary: it is not below "
            f"{stated}; nothing was sent",
            hint="leave --token-id out (the probe takes an id the tokenizer emits), or give --vocab-size N "
            "with the model's vocab_size",
        )
    # the filler's unit no longer describes the token prompts' filler, but text prompts keep using the unit
    return Vocabulary(source=vocab.source, filler=token_id,
                      candidates=tuple(c for c in vocab.candidates if c != token_id), unit=vocab.unit,
                      size=vocab.size, tokenizer=vocab.tokenizer)


"""The probe never crashes what it checks, never calls a format refusal a short pool, and names a crash.

Doubles behave as real SGLang 0.5.23 and sglang-router 0.3.2 were measured to (tests/probe/deployment.py):
an id at or above the vocabulary kills the server, the router answers 422 to token-id prompts on
/v1/completions. tests/engines/real/test_probe_real.py runs the same cases against the real ones.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from kvcheck.commands.probe import run_probe
from kvcheck.errors import InputError
from kvcheck.probe.judge import judge
from kvcheck.probe.options import ProbeOptions
from kvcheck.probe.plan import PlannedRequest
from kvcheck.probe.prompts import PATTERN_LEN, make_owners
from kvcheck.probe.wire import read_answer
from kvcheck.report.formats.json import request_dict
from tests.conftest import run_kvcheck

FAST = {"rate_per_s": 1000.0, "seed": 7}


def rows(report) -> list[dict]:
    return sorted((request_dict(row) for role in report.roles if role.probe is not None
                   for row in role.probe.requests or ()), key=lambda row: row["index"])


def posts(d) -> list[str]:
    return [s.path for s in d.seen if s.method == "POST"]


def every_id_sent(report) -> set[int]:
    owners = report.roles[0].probe.owners
    return {i for owner in owners for i in owner.pattern}


def test_a_small_vocabulary_gets_only_ids_its_tokenizer_emits_and_the_server_survives(deploy) -> None:
    d = deploy("fixed", context_len=4096, pool_tokens=8192, vocab=1024)
    report = run_probe(ProbeOptions(url=d.url, **FAST))
    assert (report.exit_code, report.findings) == (0, ())
    assert not d.crashed.is_set()
    assert 200 <= d.max_id_seen < 1024  # the old probe sent 1000 to 5096 and killed such a server
    assert every_id_sent(report) <= set(range(200, 1024))
    notes = report.roles[0].probe.notes
    assert any(n.startswith("token ids proven in range by the deployment's tokenizer (POST /v1/tokenize)")
               for n in notes), notes


def test_without_a_tokenizer_or_a_vocabulary_size_nothing_is_sent_and_it_is_kv322_exit_3(deploy) -> None:
    d = deploy("fixed", has_tokenizer=False, vocab=1024)
    report = run_probe(ProbeOptions(url=d.url, **FAST))
    assert report.exit_code == 3
    [finding] = report.findings
    assert (finding.rule, finding.role) == ("KV322", "limits")
    assert finding.message.startswith("cannot probe safely: no proof that token ids lie inside the model's vocabulary")
    assert "POST /v1/tokenize answered HTTP 500" in finding.message
    assert "--vocab-size" in finding.hint
    assert posts(d) == ["/v1/tokenize"]  # no generation request at all
    assert not d.crashed.is_set()


def test_an_explicit_token_id_beyond_what_the_tokenizer_emits_is_refused_unsent(deploy) -> None:
    d = deploy("fixed", vocab=1024)
    report = run_probe(ProbeOptions(url=d.url, token_id=2000, **FAST))
    assert report.exit_code == 3
    [finding] = report.findings
    assert finding.rule == "KV322"
    assert "--token-id 2000 is not proven inside the vocabulary" in finding.message
    assert posts(d) == ["/v1/tokenize"]
    assert not d.crashed.is_set()


def test_the_model_config_on_this_machine_proves_the_range_when_there_is_no_tokenizer(deploy, tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "vocab_size": 1024}))
    d = deploy("fixed", has_tokenizer=False, vocab=1024, model_path=str(tmp_path))
    report = run_probe(ProbeOptions(url=d.url, **FAST))
    assert (report.exit_code, report.findings) == (0, ())
    assert d.max_id_seen < 1024
    assert every_id_sent(report) < set(range(1024))
    assert any(f"vocab_size 1024 in {tmp_path / 'config.json'}" in n for n in report.roles[0].probe.notes)


def test_a_model_path_that_is_not_on_this_machine_proves_nothing(deploy, tmp_path: Path) -> None:
    d = deploy("fixed", has_tokenizer=False, model_path=str(tmp_path / "elsewhere"))
    report = run_probe(ProbeOptions(url=d.url, **FAST))
    assert [f.rule for f in report.findings] == ["KV322"]
    assert "is not a folder with config.json on this machine" in report.findings[0].message
    assert posts(d) == ["/v1/tokenize"]


def test_a_stated_vocabulary_size_bounds_every_id(deploy) -> None:
    d = deploy("fixed", has_tokenizer=False, vocab=1024)
    report = run_probe(ProbeOptions(url=d.url, vocab_size=1024, **FAST))
    assert (report.exit_code, report.findings) == (0, ())
    assert d.max_id_seen < 1024
    notes = report.roles[0].probe.notes
    assert any(n.startswith("token ids proven in range by --vocab-size 1024: filler 512") for n in notes), notes
    assert "POST /v1/tokenize answered HTTP 500" in notes  # why the tokenizer proved nothing


def test_a_token_id_at_or_above_the_stated_vocabulary_size_is_bad_input() -> None:
    with pytest.raises(InputError, match="--token-id 1024 is not below --vocab-size 1024"):
        run_probe(ProbeOptions(url="http://127.0.0.1:9", token_id=1024, vocab_size=1024))


def test_a_request_that_kills_the_server_is_kv323_not_the_network(deploy) -> None:
    # the user's --vocab-size is wrong: the id passes the proof, and the server dies as the real one does
    d = deploy("fixed", context_len=4096, pool_tokens=8192, vocab=1024)
    report = run_probe(ProbeOptions(url=d.url, vocab_size=8192, token_id=2000, **FAST))
    assert d.crashed.is_set()
    assert report.exit_code == 3
    [finding] = report.findings
    assert (finding.rule, finding.role) == ("KV323", "limits")
    assert finding.message.startswith("request #1 /generate control (32 tokens, boundary-1) lost its answer")
    assert "the probe's request crashed the server" in finding.message
    assert "GET /health" in finding.message
    assert [s.path for s in report.roles[0].probe.sent][-2:] == ["/generate", "/health"]  # nothing after


def test_a_crash_in_the_middle_stops_the_run_and_names_the_request(deploy) -> None:
    d = deploy("fixed", context_len=4096, pool_tokens=8192, crash_at_tokens=4000)  # below-bound: 4089 tokens
    report = run_probe(ProbeOptions(url=d.url, concurrency=1, openai=False, **FAST))
    assert report.exit_code == 3
    [finding] = report.findings
    assert finding.rule == "KV323"
    assert finding.message.startswith("request #2 /generate below-bound (4089 tokens, boundary-2) lost its answer")
    sent_posts = [s.path for s in report.roles[0].probe.sent if s.method == "POST"]
    assert sent_posts == ["/v1/tokenize", "/generate", "/generate"]  # control, then the killer; no more
    assert {r["verdict"] for r in rows(report) if r["index"] > 2} == {"not-sent"}


def test_through_the_router_a_422_is_a_format_refusal_and_completions_go_as_counted_text(deploy) -> None:
    d = deploy("fixed", context_len=4096, pool_tokens=8192, router=True, vocab=1024)
    report = run_probe(ProbeOptions(url=d.url, context_length=4096, pool_tokens=8192, **FAST))
    assert (report.exit_code, report.findings) == (0, ())
    completions = [r for r in rows(report) if r["endpoint"] == "/v1/completions"]
    assert [(r["check"], r["prompt"], r["prompt_tokens"], r["reported_prompt_tokens"], r["status"], r["verdict"])
            for r in completions] == [
        ("control", "words", None, 33, 200, "ok"),  # 32 words and the BOS the server adds
        ("below-bound", "words", 4089, 4089, 200, "ok"),
        ("at-bound", "words", 4090, None, 400, "ok"),
        ("window", "words", 4096, None, 400, "ok"),
    ]
    notes = report.roles[0].probe.notes
    assert any("/v1/completions refused token-id prompts (HTTP 422 to a token-id prompt: Failed to deserialize"
               in n and "a request-format refusal, not a length verdict" in n for n in notes), notes
    assert not d.crashed.is_set() and d.max_id_seen < 1024


def test_through_a_router_without_a_tokenizer_completions_are_skipped_as_kv409_never_kv404(deploy) -> None:
    d = deploy("fixed", context_len=4096, pool_tokens=8192, router=True, tokenize=False)
    report = run_probe(ProbeOptions(url=d.url, context_length=4096, pool_tokens=8192, vocab_size=8192, **FAST))
    assert report.exit_code == 0
    assert [(f.rule, f.severity) for f in report.findings] == [("KV409", "info")]
    assert "refused the request format: HTTP 422 to a token-id prompt" in report.findings[0].message
    assert "enlarge" not in report.findings[0].message
    assert posts(d).count("/v1/completions") == 1


def test_the_cli_says_kv323_and_exits_3(deploy) -> None:
    d = deploy("fixed", vocab=1024)
    r = run_kvcheck("probe", d.url, "--vocab-size", "8192", "--token-id", "2000", "--rate", "1000", "--format", "json")
    assert r.exit_code == 3, r.stderr
    assert [f["rule"] for f in json.loads(r.stdout)["findings"]] == ["KV323"]


def test_a_422_is_no_verdict_on_length() -> None:
    owners = make_owners(["me"], candidates=range(10, 60), rng=random.Random(1))
    plan = PlannedRequest(index=3, group="/v1/completions", check="below-bound", endpoint="/v1/completions",
                          stream=False, owner="me", prompt_kind="ids", prompt_tokens=2041, expect="accept",
                          max_new_tokens=5, why="B - 1")
    result = judge(plan, read_answer(422, "Failed to deserialize the JSON body", latency_ms=1.0, sse=False), owners)
    assert [h.rule for h in result.hits] == ["KV321"]
    assert "refused the request's format, not its length" in result.hits[0].message
    assert result.outcome == "format refused (HTTP 422)"


def test_owners_patterns_are_distinct_ids_from_the_candidates_even_when_few() -> None:
    candidates = range(500, 540)
    owners = make_owners([f"o{n}" for n in range(60)], candidates=candidates, rng=random.Random(2))
    patterns = [o.pattern for o in owners.values()]
    assert all(len(set(p)) == PATTERN_LEN and set(p) <= set(candidates) for p in patterns)
    assert len(set(patterns)) == 60
    assert len({p[0] for p in patterns[:40]}) == 40  # distinct first ids while the candidates allow


@pytest.mark.parametrize(("runs", "expected"), [
    ([[7] * 8, [7] * 16], (" the", 7)),  # byte-level BPE: one id per repetition
    ([[29871] + [278] * 8, [29871] + [278] * 16], (" the", 278)),  # SentencePiece's dummy-prefix piece first
    ([[5, 6] * 4, [5, 6] * 8] + [[9] * 8, [9] * 16], (" a", 9)),  # ' the' is two ids: the next word counts
    ([[5] * 8, [5] * 15], (None, None)),  # a merge somewhere: not one token per repetition
])
def test_the_unit_word_is_one_token_per_repetition_after_a_constant_prefix(runs, expected) -> None:
    from kvcheck.probe.vocab import UNITS, _linear_unit

    padded = runs + [[1, 2]] * (2 * len(UNITS) - len(runs))  # the other units: not linear
    assert _linear_unit(padded) == expected

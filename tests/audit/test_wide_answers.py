"""Wide answers and impossible figures (issue 20, classes 3 and 7): what a hostile or broken server sends
is read within bounded memory and work, `--timeout` bounds the whole server, and a figure that is not
a token count is KV306 (exit 3) by every route: JSON, a Prometheus gauge.

Memory is measured in a fresh process (`resource.getrusage` of its only child, kvcheck), work by
counting (requests the server saw, catalogue look-ups), never by timing a fast path.
"""

from __future__ import annotations

import difflib
import json
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import REPO_ROOT

from .servers import Reply, metrics_text, server_info_payload, sglang_routes

FAST = ("--timeout", "10", "--retries", "0")
MIB = 1 << 20
# kvcheck's own peak RSS on an audit is ~47 MiB here; a wide answer may add what it costs to read a body under
# the 32 MiB cap (the bytes, their decoded text, a 30 MiB string value parsed once), never what parsing it into
# Python objects would (1.6 GiB for 30 MiB of `{},`). Measured in these tests: 106-108 MiB for the refused
# answers, 137-164 MiB for the 30 MiB string, which varies run to run with when the allocator returns the
# copies (four runs on 2026-12-02: 137, 152, 157, 164); the bound keeps a margin over that and stays ten
# times below the object-parsing failure it guards against.
PEAK_BOUND_MIB = 200
# the memory tests read up to 30 MiB from a local server: a per-request limit a loaded CI runner cannot miss, as
# they measure memory, not time
ROOMY = ("--timeout", "120", "--retries", "0")


def _peak_rss_mib(*args: str) -> tuple[int, str, str, float]:
    """(exit code, stdout, stderr, peak RSS in MiB) of `python -m kvcheck ARGS` in a fresh process."""
    probe = textwrap.dedent(
        """
        import json, resource, subprocess, sys
        done = subprocess.run([sys.executable, "-m", "kvcheck", *sys.argv[1:]], capture_output=True, text=True)
        peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # the only child: kvcheck
        print(json.dumps([done.returncode, done.stdout, done.stderr, peak_kib / 1024]))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    code, stdout, stderr, peak = json.loads(done.stdout)
    return code, stdout, stderr, peak


def _kv306(stdout: str) -> list[str]:
    data = json.loads(stdout)
    assert data["exit_code"] == 3
    return [f["message"] for f in data["findings"] if f["rule"] == "KV306"]


# -- wide answers: bounded memory ---------------------------------------------------------------------


def test_30_mib_of_empty_objects_is_refused_before_parsing_in_bounded_memory(serve):
    filler = b",".join([b"{}"] * (10 * MIB))  # 30 MiB, under the 32 MiB body cap: ~10.5 million values
    body = b'{"max_total_num_tokens": 4096, "x": [' + filler + b"]}"
    assert len(body) < 32 * MIB
    server = serve({"/server_info": Reply(body=body, content_type="application/json")})
    code, stdout, stderr, peak = _peak_rss_mib("audit", server.url, *ROOMY, "--format", "json")
    assert code == 3, stderr
    [message] = _kv306(stdout)
    assert message.startswith(f"{server.url}/server_info: the answer cannot be read safely: more than 262,144 "
                              "values in one document")
    print(f"peak RSS {peak:.0f} MiB")
    assert peak < PEAK_BOUND_MIB, f"peak RSS {peak:.0f} MiB"


def test_30_mib_of_metric_newlines_is_refused_in_bounded_memory(serve):
    routes = sglang_routes(server_info_payload(max_total_num_tokens=300000), served_context=262144)
    routes["/metrics"] = Reply(body=b"\n" * (30 * MIB), content_type="text/plain; version=0.0.4")
    server = serve(routes)
    code, stdout, stderr, peak = _peak_rss_mib("audit", server.url, *ROOMY, "--format", "json")
    assert code == 3, stderr
    assert _kv306(stdout) == [
        f"{server.url}/metrics: the answer has 31,457,281 lines, more than any SGLang server's "
        "(kvcheck reads at most 262,144)"
    ]
    print(f"peak RSS {peak:.0f} MiB")
    assert peak < PEAK_BOUND_MIB, f"peak RSS {peak:.0f} MiB"


def test_a_30_mib_string_is_read_in_bounded_memory_and_judged(serve):
    payload = server_info_payload(max_total_num_tokens=300000, extra_args={"note": "x" * (30 * MIB)})
    server = serve(sglang_routes(payload, served_context=262144))
    code, _, stderr, peak = _peak_rss_mib("audit", server.url, *ROOMY, "--format", "json")
    assert code == 0, stderr
    print(f"peak RSS {peak:.0f} MiB")
    assert peak < PEAK_BOUND_MIB, f"peak RSS {peak:.0f} MiB"  # the string itself is 30 MiB, held once or twice


# -- wide answers: bounded work ---------------------------------------------------------------------


def test_200000_unknown_keys_are_kv306_without_one_catalogue_search(serve, kvcheck, monkeypatch):
    searches: list[str] = []
    real = difflib.get_close_matches
    monkeypatch.setattr(difflib, "get_close_matches", lambda word, *a, **k: searches.append(word) or real(word, *a, **k))
    payload = server_info_payload(extra_args={f"unknown_key_{i}": i for i in range(200_000)})
    server = serve(sglang_routes(payload))
    result = kvcheck("audit", server.url, *FAST, "--format", "json")
    assert result.exit_code == 3, result.stderr
    assert _kv306(result.stdout) == [
        f"{server.url}/server_info: the answer has {len(payload):,} keys, more than any SGLang server's "
        "(kvcheck reads at most 2,048)"
    ]
    assert searches == []


def test_2000_unknown_keys_are_judged_with_dict_lookups_only(serve, kvcheck, monkeypatch):
    searches: list[str] = []
    real = difflib.get_close_matches
    monkeypatch.setattr(difflib, "get_close_matches", lambda word, *a, **k: searches.append(word) or real(word, *a, **k))
    extra = {f"unknown_key_{i}": f"value-{i}" for i in range(2_000)}
    payload = server_info_payload(max_total_num_tokens=300000, max_req_input_len=262138, extra_args=extra)
    server = serve(sglang_routes(payload, served_context=262144))
    result = kvcheck("audit", server.url, *FAST, "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert searches == []  # each key used to cost a did-you-mean search of the flag catalogue (~5 ms)


def test_a_launch_command_longer_than_any_command_line_is_kv306(serve, kvcheck):
    payload = server_info_payload()
    payload["launch_command"] = "python3 -m sglang.launch_server " + "--x 'a b' " * 40_000
    server = serve(sglang_routes(payload))
    result = kvcheck("audit", server.url, *FAST, "--format", "json")
    assert result.exit_code == 3, result.stderr
    assert _kv306(result.stdout) == [
        f"{server.url}/server_info: launch_command is 400,032 characters long, longer than a command line "
        "can be (kvcheck reads at most 262,144)"
    ]


def test_a_giant_sample_line_of_a_wanted_gauge_is_kv306(serve, kvcheck):
    routes = sglang_routes(server_info_payload(max_total_num_tokens=300000), served_context=262144)
    labels = ",".join(f'l{i}="v"' for i in range(20_000))
    routes["/metrics"] = Reply(body=f"sglang:max_total_num_tokens{{{labels}}} 300000\n",
                               content_type="text/plain; version=0.0.4")
    server = serve(routes)
    result = kvcheck("audit", server.url, *FAST, "--format", "json")
    assert result.exit_code == 3, result.stderr
    [message] = _kv306(result.stdout)
    assert message.startswith(f"{server.url}/metrics: a sglang:max_total_num_tokens sample is ")
    assert message.endswith(" characters long (at most 65,536 are read)")


def test_timeout_bounds_the_whole_server_not_each_request(serve, kvcheck):
    # Each attempt answers 503 after 0.4 s: with --retries 5 the attempts and their backoff (0.5, 1, 2, 4,
    # 8 s) used to take ~18 s under --timeout 1, since the timeout bounded each request alone.
    server = serve({"/server_info": Reply(503, {"detail": "starting"}, delay_s=0.4)})
    result = kvcheck("audit", server.url, "--timeout", "1", "--retries", "5", "--format", "json")
    assert result.exit_code == 3, result.stderr
    tries = server.paths().count("/server_info")
    assert 1 <= tries <= 2  # the first answer, and one retry if its backoff still fits in the second
    [message] = _kv306(result.stdout)
    assert message.startswith(f"{server.url}/server_info: ")


# -- impossible figures: the same validation on every route --------------------------------------------


@pytest.mark.parametrize(
    ("gauge", "value", "shown"),
    [
        ("sglang:max_total_num_tokens", "-5", "-5.0"),  # was judged: exit 1 on a pool of -5 tokens
        ("sglang:max_total_num_tokens", "200000.5", "200000.5"),  # was truncated to 200,000 and passed
        ("sglang:context_len", "1e300", "1e+300"),  # was the window judged against
    ],
)
def test_an_impossible_gauge_is_kv306(serve, kvcheck, gauge, value, shown):
    payload = server_info_payload(max_total_num_tokens=300000, max_req_input_len=131066)
    routes = sglang_routes(payload, served_context=None)  # no /v1/models: sglang:context_len is the window
    text = metrics_text(pool_tokens=[300000, 300000], context_len=131072)
    routes["/metrics"] = Reply(body=text + f'{gauge}{{tp_rank="1"}} {value}\n', content_type="text/plain")
    server = serve(routes)
    result = kvcheck("audit", server.url, *FAST, "--format", "json")
    assert result.exit_code == 3, result.stderr
    assert _kv306(result.stdout) == [
        f"{server.url}/metrics: the {gauge} gauge is {shown}, not a token count (an integer from 0 to 2,147,483,647)"
    ]


@pytest.mark.parametrize(
    ("where", "payload_change", "message"),
    [
        ("/v1/models", None, "data[0].max_model_len is 1e+300, not a token count"),
        ("/server_info", {"max_req_input_len": -5}, "max_req_input_len is -5, not a token count"),
        ("/server_info", {"max_req_input_len": 200000.5}, "max_req_input_len is 200000.5, not a token count"),
    ],
)
def test_an_impossible_json_figure_is_kv306(serve, kvcheck, where, payload_change, message):
    payload = server_info_payload(max_total_num_tokens=300000, max_req_input_len=262138)
    payload.update(payload_change or {})
    routes = sglang_routes(payload, served_context=262144)
    if where == "/v1/models":
        routes["/v1/models"] = Reply(body=b'{"object": "list", "data": [{"id": "m", "max_model_len": 1e300}]}',
                                     content_type="application/json")
    server = serve(routes)
    result = kvcheck("audit", server.url, *FAST, "--format", "json")
    assert result.exit_code == 3, result.stderr
    assert _kv306(result.stdout) == [
        f"{server.url}{where}: {message} (an integer from 0 to 2,147,483,647)"
    ]

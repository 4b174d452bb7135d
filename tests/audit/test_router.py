"""`kvcheck audit` of an sglang-router (issue 19 item 8): recognised, its workers followed and judged each
like a fleet's server (bounded in number), and failing closed whenever they cannot all be audited.

The router's answers are those of sglang-router 0.3.2 on the real install (tests/engines/real has the
real router): `/server_info` 404, `/get_server_info` `{"router_manager": true, ...}`, `/workers`.
"""

from __future__ import annotations

import json

from .servers import Reply, router_routes, server_info_payload, sglang_routes

FAST = ("--timeout", "5", "--retries", "0")
TOKEN = "sk-router-token-0123456789"


def worker(serve, pool: int = 300000, served: int = 262144):
    return serve(sglang_routes(server_info_payload(max_total_num_tokens=pool, max_req_input_len=min(pool, served) - 6),
                               served_context=served))


def audit_json(kvcheck, *args: str, env: dict[str, str] | None = None):
    result = kvcheck("audit", *args, *FAST, "--format", "json", env=env)
    return result.exit_code, json.loads(result.stdout), result.stderr


def test_a_router_is_followed_to_each_worker_and_passes_when_every_worker_does(serve, kvcheck):
    a, b = worker(serve), worker(serve)
    router = serve(router_routes([(a.url, "regular"), (b.url, "regular")]))
    code, data, stderr = audit_json(kvcheck, router.url)
    assert code == 0, stderr
    assert [(r["name"], r["status"], r["pool_tokens"]) for r in data["roles"]] == [
        (f"{router.url} worker {a.url}", "pass", 300000),
        (f"{router.url} worker {b.url}", "pass", 300000),
    ]
    assert router.paths() == ["/server_info", "/get_server_info", "/workers"]


def test_one_short_worker_behind_a_router_fails_the_gate(serve, kvcheck):
    good, short = worker(serve), worker(serve, pool=100000)
    router = serve(router_routes([(good.url, "regular"), (short.url, "regular")]))
    code, data, _ = audit_json(kvcheck, router.url)
    assert code == 1
    assert [(f["rule"], f["role"]) for f in data["findings"]] == [("KV101", f"{router.url} worker {short.url}")]


def test_a_router_whose_worker_list_cannot_be_read_is_exit_3(serve, kvcheck):
    router = serve(router_routes([], workers_route=Reply(401, {"error": "admin role required"})))
    code, data, _ = audit_json(kvcheck, router.url)
    assert code == 3
    [finding] = data["findings"]
    assert finding["rule"] == "KV306"
    assert finding["message"] == (
        f"{router.url} is an sglang-router, not an SGLang server (/get_server_info says router_manager): it holds "
        f"no KV pool of its own; its worker list cannot be read ({router.url}/workers: HTTP 401 Unauthorized), "
        "so no worker was audited"
    )


def test_a_router_without_workers_is_exit_3(serve, kvcheck):
    router = serve(router_routes([]))
    code, data, _ = audit_json(kvcheck, router.url)
    assert code == 3
    assert [f["message"].split("; ")[-1] for f in data["findings"]] == [
        "it lists no workers, so there is nothing to audit behind it"
    ]


def test_an_unreachable_worker_fails_closed(serve, kvcheck, closed_port):
    good = worker(serve)
    gone = f"http://127.0.0.1:{closed_port}"
    router = serve(router_routes([(good.url, "regular"), (gone, "regular")]))
    code, data, _ = audit_json(kvcheck, router.url)
    assert code == 3
    assert [(r["name"], r["status"]) for r in data["roles"]] == [
        (f"{router.url} worker {good.url}", "pass"),
        (f"{router.url} worker {gone}", "error"),
    ]


def test_workers_past_the_cap_are_reported_not_dropped(serve, kvcheck, closed_port):
    good = worker(serve)
    listed = [(good.url, "regular")] + [(f"http://127.0.0.{n}:{closed_port}", "regular") for n in range(2, 72)]
    router = serve(router_routes(listed))
    code, data, _ = audit_json(kvcheck, router.url)
    assert code == 3
    names = [r["name"] for r in data["roles"]]
    assert len(names) == 65 and names[-1] == router.url  # 64 workers audited, then the router's KV306
    [left_out] = [f for f in data["findings"] if f["role"] == router.url]
    assert left_out["message"] == (
        f"{router.url} is an sglang-router listing 71 workers; kvcheck audits at most 64 behind one router, "
        "so 7 were not audited"
    )


def test_the_routers_token_is_not_sent_to_its_workers(serve, kvcheck):
    a = worker(serve)
    router = serve(router_routes([(a.url, "regular")]), token=TOKEN)
    code, _, stderr = audit_json(kvcheck, router.url, "--token-env", "ROUTER_TOKEN", env={"ROUTER_TOKEN": TOKEN})
    assert code == 0, stderr
    assert all("authorization" not in r.headers for r in a.requests)
    assert all(r.headers.get("authorization") == f"Bearer {TOKEN}" for r in router.requests)


def test_a_router_behind_a_router_is_not_followed(serve, kvcheck):
    inner_worker = worker(serve)
    inner = serve(router_routes([(inner_worker.url, "regular")]))
    outer = serve(router_routes([(inner.url, "regular")]))
    code, data, _ = audit_json(kvcheck, outer.url)
    assert code == 3
    [finding] = data["findings"]
    assert finding["role"] == f"{outer.url} worker {inner.url}"
    assert finding["message"].endswith(f"its workers: {inner_worker.url} (a router behind a router is not followed)")
    assert inner_worker.requests == []


def test_a_manifest_role_pointed_at_a_router_is_told_to_use_a_worker(serve, kvcheck, tmp_path):
    a = worker(serve)
    router = serve(router_routes([(a.url, "regular")]))
    manifest = tmp_path / "m.yaml"
    manifest.write_text(
        "name: t\ncontext_length: 262144\nmodel: {path: zai-org/GLM-5-FP8}\nengine: {version: '0.5.23'}\n"
        "gpu: H200\nargs: {tp-size: 8}\nroles:\n  server: {gpus: [0, 1, 2, 3, 4, 5, 6, 7]}\n"
    )
    result = kvcheck("audit", "--manifest", str(manifest), "--endpoint", f"server={router.url}", *FAST,
                     "--format", "json")
    assert result.exit_code == 3, result.stderr
    [finding] = [f for f in json.loads(result.stdout)["findings"] if f["rule"] == "KV306"]
    assert finding["message"].endswith(f"its workers: {a.url} (a manifest role is one server)")
    assert finding["hint"] == "point --endpoint at one of its workers"
    assert a.requests == []

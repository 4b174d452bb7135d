"""SGLang's argparse as kvcheck reads it: aliases, abbreviations, =value, repeats, switches, problems."""

from __future__ import annotations

from kvcheck.engines.argv import parse_argv
from kvcheck.engines.sglang.argv import launch_index
from kvcheck.engines.sglang.catalogue import load_catalogue

CAT = load_catalogue("0.5.23")[0]


def _parse(line: str):
    argv = line.split()
    return parse_argv(argv, CAT, start=launch_index(argv))


def test_aliases_abbreviations_and_inline_values_resolve_to_catalogue_names():
    parsed = _parse(
        "python3 -m sglang.launch_server --model-path m --tensor-parallel-size 4 --mem-frac 0.8 "
        "--context-length=128k --kv-cache-dtype fp8_e4m3 --enable-dp-attention --dp 2"
    )
    final = parsed.final
    assert {k: v.value for k, v in final.items()} == {
        "model-path": "m",
        "tp-size": 4,
        "mem-fraction-static": 0.8,
        "context-length": 128000,
        "kv-cache-dtype": "fp8_e4m3",
        "enable-dp-attention": True,
        "dp-size": 2,
    }
    assert final["tp-size"].index == 5 and final["tp-size"].value_indexes == (6,)
    assert final["context-length"].value_indexes == (9,)  # =value: the flag's own token
    assert final["mem-fraction-static"].spelled == "--mem-frac"
    assert parsed.problems == ()


def test_repeated_flag_last_wins_and_is_reported():
    parsed = _parse("sglang serve --tp-size 2 --tp 8")
    assert parsed.final["tp-size"].value == 8
    assert parsed.final["tp-size"].index == 4
    assert [(p.index, p.kind) for p in parsed.problems] == [(4, "repeated")]


def test_unknown_removed_ambiguous_bad_value_and_stray_words_are_problems():
    parsed = _parse(
        "python -m sglang.launch_server --mem-fraction-statc 0.8 --elastic-ep-rejoin --enable "
        "--tp-size four --kv-cache-dtype fp9 stray"
    )
    kinds = [(p.index, p.kind) for p in parsed.problems]
    assert kinds == [(3, "unknown"), (5, "removed"), (6, "ambiguous"), (8, "value"), (10, "value"), (11, "stray")]
    assert "did you mean 'mem-fraction-static'" in parsed.problems[0].message
    unknown = parsed.final["mem-fraction-statc"]
    assert unknown.flag is None and unknown.value == "0.8"


def test_switch_with_value_and_missing_value():
    parsed = _parse("python -m sglang.launch_server --enable-dp-attention=true --tp-size")
    assert [(p.index, p.kind) for p in parsed.problems] == [(3, "switch"), (4, "value")]


def test_launch_index_finds_module_serve_and_dynamo_but_not_the_router():
    assert launch_index(["python3", "-m", "sglang.launch_server", "--tp", "2"]) == 3
    assert launch_index(["/usr/bin/sglang", "serve", "--tp", "2"]) == 2
    assert launch_index(["python3", "-m", "dynamo.sglang", "--tp", "2"]) == 3
    assert launch_index(["python3", "-m", "sglang_router.launch_router"]) is None


def test_negative_numbers_are_values():
    parsed = _parse("python -m sglang.launch_server --random-seed -1")
    assert parsed.final["random-seed"].value == -1

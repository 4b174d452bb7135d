"""The suppression module's parts that the CLI tests cannot isolate: which lines a comment covers, the
baseline's identity, and that a suppressed finding's text is redacted like any other."""

from __future__ import annotations

import datetime as dt

import pytest

from kvcheck.errors import InputError
from kvcheck.model import Finding, Location, Report, Suppressed
from kvcheck.policy.suppress import Gate, GateOptions, identity, parse_inline
from kvcheck.redact import redact_report
from kvcheck.report.formats.json import report_to_dict


def test_a_trailing_comment_covers_its_line_and_a_lone_one_the_next_line_that_is_not_a_comment() -> None:
    text = ("args:\n"
            "  a: 1  # kvcheck: ignore KV205 reason=one\n"
            "  # kvcheck: ignore KV202 until=2099-01-01 reason=two\n"
            "  # an ordinary comment\n"
            "\n"
            "  b: 2\n")
    trailing, lone = parse_inline(text, "m.yaml")
    assert (trailing.lines, trailing.until, trailing.reason) == (frozenset({2}), None, "one")
    assert (lone.lines, lone.until, lone.reason) == (frozenset({3, 6}), dt.date(2099, 1, 1), "two")


def test_a_hash_inside_a_word_is_not_a_comment() -> None:
    assert parse_inline("url: http://x/#kvcheck: ignore KV205\n", "m.yaml") == []


@pytest.mark.parametrize(("text", "name"), [
    # a quoted YAML value, flow or block style, a block scalar's content: data, not comments
    ('args: [--served-model-name, "a # kvcheck: ignore KV101 reason=str"]\n', "deploy.yaml"),
    ("args:\n  served-model-name: 'x # kvcheck: ignore KV101 reason=str'\n", "m.yaml"),
    ("script: |\n  echo hi\n  # kvcheck: ignore KV101 reason=inside a block scalar\n", "m.yaml"),
    # a quoted shell word, a here-document
    ('#!/bin/bash\nsrun python -m sglang.launch_server --served-model-name "a # kvcheck: ignore KV101 '
     'reason=str"\n', "job.sh"),
    ("#!/bin/bash\nsrun python -m x --served-model-name 'a # kvcheck: ignore KV101 reason=str'\n", "job.sh"),
    ("#!/bin/bash\ncat > a.yaml <<EOF\nx: 1  # kvcheck: ignore KV101 reason=heredoc\nEOF\n", "job.sh"),
    ("#SBATCH -N 1\necho a\\ # kvcheck: ignore KV101 reason=escaped\n", "job"),
])
def test_a_kvcheck_comment_inside_the_files_data_suppresses_nothing(text: str, name: str) -> None:
    assert parse_inline(text, name) == []


@pytest.mark.parametrize(("text", "name", "line"), [
    ('args: [--served-model-name, "a"]  # kvcheck: ignore KV101 reason=real\n', "deploy.yaml", 1),
    ("a: 1\n# kvcheck: ignore KV101 reason=real\nb: 2\n", "m.yaml", 2),
    ('#!/bin/bash\nsrun python -m x --name "a"  # kvcheck: ignore KV101 reason=real\n', "job.sh", 2),
    ("#!/bin/bash\ncat > a <<'EOF'\nx\nEOF\necho b # kvcheck: ignore KV101 reason=after the heredoc\n",
     "job.sh", 5),
    ("a: [1,\n", "broken.yaml", None),  # YAML that does not scan is read as a shell reads it
])
def test_a_kvcheck_comment_outside_the_data_suppresses(text: str, name: str, line: int | None) -> None:
    if line is None:
        text += "# kvcheck: ignore KV101 reason=real\n"
        line = 2
    [found] = parse_inline(text, name)
    assert (found.rules, found.source.line) == (frozenset({"KV101"}), line)
    assert text.splitlines()[line - 1].endswith(f"reason={found.reason}")


def test_the_identity_ignores_lines_and_figures_but_not_the_rule_role_or_file() -> None:
    base = identity("KV205", "decode", "deploy/m.yaml", "mem-fraction-static 0.95 is above 0.83 (13,904 MiB)")
    assert identity("KV205", "decode", "deploy/./m.yaml", "mem-fraction-static 0.97 is above 0.81 (12,000 MiB)") == base
    assert identity("KV205", "prefill", "deploy/m.yaml", "mem-fraction-static 0.95 is above 0.83 (13,904 MiB)") != base
    assert identity("KV202", "decode", "deploy/m.yaml", "mem-fraction-static 0.95 is above 0.83 (13,904 MiB)") != base
    assert identity("KV205", "decode", "other.yaml", "mem-fraction-static 0.95 is above 0.83 (13,904 MiB)") != base


def test_a_kv3xx_finding_is_never_covered_even_by_a_baseline_being_written(tmp_path) -> None:
    gate = Gate.open(GateOptions(write_baseline=tmp_path / "b.json"))
    failed = Finding("KV301", "error", "server", "could not be measured")
    warned = Finding("KV205", "warning", "server", "above")
    kept, held = gate.split([failed, warned])
    assert (kept, [item.finding for item in held]) == ([failed], [warned])


def test_baseline_and_write_baseline_together_are_refused(tmp_path) -> None:
    with pytest.raises(InputError, match="one or the other"):
        Gate.open(GateOptions(baseline=tmp_path / "a.json", write_baseline=tmp_path / "b.json"))


def test_a_suppressed_findings_text_is_redacted() -> None:
    secret = "hf_abcdefghijklmnopqrstuvwxyz0123456789"
    item = Finding("KV205", "warning", "server", f"token {secret} in the args", location=Location("m.yaml", 3))
    report = Report(command="verify", mode="estimate", source="m.yaml", context_length=1, roles=(), findings=(),
                    suppressed=(("KV205", 1),), secrets=frozenset({secret}),
                    suppressions=(Suppressed(item, "inline", f"because {secret}", None, Location("m.yaml", 3)),))
    shown = report_to_dict(redact_report(report, environ={}))
    assert secret not in str(shown)
    assert shown["suppressions"][0]["rule"] == "KV205"

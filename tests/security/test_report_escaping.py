"""Untrusted text in the GitHub, JUnit, SARIF and Markdown reports (issue 20, class 1, re-audited).

Role names come from fleet files, manifests and file names; messages quote servers. Each format escapes
them for its own reader: Markdown's specials (HTML, links and images, code spans, cells) are
backslash-escaped, SARIF's texts are shown escaped like every other format's (JSON's own escaping is
undone by the viewer, which then ran `\\x1b` and `\\u202e` again), JUnit stays well-formed XML, and a
GitHub annotation stays one workflow command. Each attack runs the real CLI on a real fleet file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from kvcheck.report.formats.base import markdown_code, markdown_text
from tests.security.helpers import attack

# a name that would render HTML, a link and an image, close a code span and break a table row; with a
# right-to-left override, a terminal escape and a line separator
HOSTILE = "<img src=//evil.example/x.png>[PASS](https://evil.example) ![t](//evil.example/t.png) `| x |`"
CONTROLS = "\u202eedon\x1b[2J\u2028"
NAMES = (HOSTILE, CONTROLS + "srv", "plain")


def _fleet(tmp_path: Path) -> Path:
    fleet = tmp_path / "fleet.yaml"
    entries = [f"{json.dumps(name)}: http://127.0.0.1:{port}" for name, port in zip(NAMES, (1, 2, 3), strict=True)]
    fleet.write_text("\n".join(entries) + "\n", encoding="utf-8")
    return fleet


def _audit(tmp_path: Path, fmt: str) -> str:
    out = attack("audit", "--fleet", str(_fleet(tmp_path)), "--context-length", "131072", "--format", fmt,
                 "--timeout", "2", "--retries", "0")
    assert out.exit_code == 3, out.stderr
    for raw in ("\u202e", "\x1b", "\u2028"):
        assert raw not in out.stdout, (fmt, raw)
    return out.stdout


def test_markdown_shows_html_links_and_images_as_text(tmp_path: Path) -> None:
    text = _audit(tmp_path, "markdown")
    assert "<img" not in text.replace("\\<img", "")  # never an unescaped tag
    assert not re.search(r"(?<!\\)\[PASS(?<!\\)\]\(", text)  # never a link
    assert "\\<img src=//evil.example/x.png\\>\\[PASS\\](https://evil.example) !\\[t\\](//evil.example/t.png) " \
           "\\`\\| x \\|\\`" in text
    assert r"\\u202eedon\\x1b\[2J\\u2028srv" in text  # rendered: \u202eedon\x1b[2J\u2028srv
    rows = [line for line in text.splitlines() if line.startswith("| ") and "http://127.0.0.1" not in line]
    role_rows = [line for line in rows if "ERROR" in line]
    assert len(role_rows) == 3
    for line in role_rows:  # seven cells each: no name adds or removes one
        assert len(re.findall(r"(?<!\\)\|", line)) == 8, line


def test_markdown_escapes_and_code_spans() -> None:
    assert markdown_text("a|b\nc*d*_e_ <b>&amp; ~~s~~ \\") == "a\\|b<br>c\\*d\\*\\_e\\_ \\<b\\>\\&amp; \\~\\~s\\~\\~ \\\\"
    assert markdown_code("deploy.yaml") == "`deploy.yaml`"
    assert markdown_code("a``b") == "```a``b```"
    assert markdown_code("`x\n## PASS") == "`` `x\\n## PASS ``"  # one line, the fence longer than any run


def test_sarif_texts_are_shown_escaped(tmp_path: Path) -> None:
    log = json.loads(_audit(tmp_path, "sarif"))
    results = log["runs"][0]["results"]
    roles = {r["properties"]["role"] for r in results}
    assert "\\u202eedon\\x1b[2J\\u2028srv" in roles
    for result in results:
        for raw in ("\u202e", "\x1b", "\u2028"):
            assert raw not in result["message"]["text"] and raw not in result["properties"]["role"]


def test_github_annotations_stay_one_command_each(tmp_path: Path) -> None:
    text = _audit(tmp_path, "github")
    lines = text.splitlines()
    assert all(line.startswith(("::error ", "::warning ", "::notice ", "kvcheck audit: ")) for line in lines), lines
    assert sum(line.startswith("::error ") for line in lines) == 3


def test_junit_parses_and_carries_the_names_escaped(tmp_path: Path) -> None:
    suite = ET.fromstring(_audit(tmp_path, "junit"))
    names = [case.get("name") for case in suite.iter("testcase")]
    assert names == [HOSTILE, "\\u202eedon\\x1b[2J\\u2028srv", "plain"]


@pytest.mark.parametrize("fmt", ["markdown", "github", "junit", "table"])  # sarif: decoded, above
def test_every_format_shows_the_bidi_override_escaped(tmp_path: Path, fmt: str) -> None:
    assert "\\u202e" in _audit(tmp_path, fmt)


def test_the_plan_section_headline_escapes_the_role_name(tmp_path: Path) -> None:
    from tests.conftest import REPO_ROOT

    example = REPO_ROOT / "docs" / "examples" / "single-server"
    manifest = (example / "manifest.yaml").read_text().replace(
        "config: llama-3.1-8b-instruct.config.json", f"config: {example / 'llama-3.1-8b-instruct.config.json'}"
    ).replace("\n  server:", '\n  "<img src=//evil.example/x.png>[PASS](https://evil.example)":')
    path = tmp_path / "manifest.yaml"
    path.write_text(manifest)
    out = attack("plan", str(path), "--format", "markdown")
    assert out.exit_code == 0, out.stderr
    [headline] = [line for line in out.stdout.splitlines() if line.startswith("### ")]
    assert headline.startswith("### plan for \\<img src=//evil.example/x.png\\>\\[PASS\\](https://evil.example): ")


def test_the_probe_requests_block_cannot_be_closed_by_a_row() -> None:
    from kvcheck.probe.table import _rows_markdown

    block = _rows_markdown("1 GET /x 200\n```\n## kvcheck probe: PASS\n")
    assert block.startswith("````\n") and block.endswith("\n````\n")  # longer than the ``` a row holds

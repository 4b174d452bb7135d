"""The redactor is linear in its input (issue 20, class 4): every report and stderr line goes through it.

The patterns it used before are kept here as the reference: the linear scanners of kvcheck/scrub.py must
find exactly what they found, on texts built to hit every corner (quotes, runs of name characters,
`--` inside words, lone quotes, URLs), and must not take quadratic time on a long run of
`[A-Za-z0-9_.-]`, where the old ones took tens of seconds for 20 KB.
"""

from __future__ import annotations

import random
import re
import time

import pytest

from kvcheck import scrub
from kvcheck.redact import REDACTED, redact_text

_WORD = r"[A-Za-z0-9_.\-]*"
OLD_ASSIGNED = re.compile(
    r"(?P<key>(?P<q>['\"]?)(?:" + _WORD + r"(?:api[_-]?key|secret|passw(?:or)?d|credential|private[_-]?key)"
    + _WORD + r"|" + _WORD + r"(?<![A-Za-z0-9])token|" + _WORD + r"[_-]token)(?P=q))"
    r"(?P<sep>\s*[:=]\s*)(?P<value>'[^']*'|\"[^\"]*\"|[^\s,}\]'\"]+)",
    re.I,
)
OLD_FLAG = re.compile(
    r"(?P<flag>--(?:" + _WORD + r"(?:api-key|secret|password|passwd|credential|private-key)" + _WORD
    + r"|(?:" + _WORD + r"-)?token))(?P<sep>[ =])(?P<value>'[^']*'|\"[^\"]*\"|\S+)",
    re.I,
)
OLD_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^/?#@\s'\"]+)@")

PIECES = ["api_key", "apikey", "secret", "password", "token", "Token", "_token", "-token", ".token", "--", "-",
          "_", ".", "=", ":", " ", "'", '"', "a", "B", "1", ",", "}", "x", "://", "@", "/", "http", "é", "+",
          "private-key", "api-key", "passwd", "\n"]


def mark(key: str, sep: str, value: str) -> str:
    return f"<{key}|{sep}|{value}>"


def test_the_scanners_find_exactly_what_the_old_patterns_found() -> None:
    rnd = random.Random(20)
    for _ in range(30_000):
        text = "".join(rnd.choice(PIECES) for _ in range(rnd.randint(1, 14)))
        assert scrub.sub_assigned(text, mark) == OLD_ASSIGNED.sub(
            lambda m: mark(m["key"], m["sep"], m["value"]), text), text
        assert scrub.sub_flags(text, mark) == OLD_FLAG.sub(
            lambda m: mark(m["flag"], m["sep"], m["value"]), text), text
        assert scrub.sub_userinfo(text, lambda s: f"{s}X@") == OLD_USERINFO.sub(
            lambda m: f"{m['scheme']}X@", text), text
        assert [m["userinfo"] for m in scrub.userinfo_matches(text)] == [
            m["userinfo"] for m in OLD_USERINFO.finditer(text)], text


def test_secrets_are_still_hidden() -> None:
    text = ("api_key=sk-live 'hf_token': 'abc' --admin-api-key=pw9 --hf-token \"q w\" "
            "https://bob:pa55@host/x DB.PASSWORD: hunter2x")
    assert redact_text(text) == (f"api_key={REDACTED} 'hf_token': '{REDACTED}' --admin-api-key={REDACTED} "
                                 f"--hf-token \"{REDACTED}\" https://{REDACTED}@host/x DB.PASSWORD: {REDACTED}")


def test_a_location_opening_a_line_is_not_a_secret_but_an_assignment_still_is() -> None:
    # `/etc/passwd:1:` read as `passwd: 1` lost the line number ("/etc/passwd:REDACTED not a deployment file")
    assert redact_text("/etc/passwd:1: not a deployment file\nm.yaml:3:4: api_key=zzz") == (
        f"/etc/passwd:1: not a deployment file\nm.yaml:3:4: api_key={REDACTED}")
    assert redact_text("password:12: x") == f"password:{REDACTED} x"  # no path: a value, as before
    assert redact_text("https://u:p@h/f.yaml:3: x") == f"https://{REDACTED}@h/f.yaml:3: x"
    assert redact_text("/run/hunter2x/a.yaml:3: x", ["hunter2x"]) == f"/run/{REDACTED}/a.yaml:3: x"


MIB_OF = {
    "a name run": "a" * (1 << 20),
    "dashes": "-" * (1 << 20),
    "dotted words": "a." * (1 << 19),
    "flag-like": "--" + "a-" * (1 << 19),
    "scheme-like": "a." * (1 << 19) + "://",
    "secret words": "secret" * 174_763,
    "token keys": "x_token: " * 116_508,
    "urls": "a://b@" * 174_763,
    "location-like": "a/b.c:1" * 149_796 + ": x",
    "location lines": "a/b:1: password=x\n" * 55_188,
}


@pytest.mark.parametrize("text", MIB_OF.values(), ids=MIB_OF.keys())
def test_a_mebibyte_of_hostile_text_is_redacted_in_linear_time(text: str) -> None:
    # a bound, not a speed claim: the old patterns took hours on these (37 s for 20 KB of `a`)
    started = time.monotonic()
    redact_text(text)
    assert time.monotonic() - started < 10


def test_a_long_manifest_value_does_not_stall_the_report(tmp_path, kvcheck) -> None:
    # a 200 KB name reaches every format's report: the old redactor took minutes over it
    from tests.conftest import EXAMPLES

    example = EXAMPLES / "single-server"
    (tmp_path / "llama-3.1-8b-instruct.config.json").write_bytes(
        (example / "llama-3.1-8b-instruct.config.json").read_bytes())
    manifest = tmp_path / "m.yaml"
    manifest.write_text((example / "manifest.yaml").read_text(encoding="utf-8").replace(
        "name: llama-3.1-8b single server", "name: " + "a." * 100_000), encoding="utf-8")
    started = time.monotonic()
    result = kvcheck("verify", str(manifest), "--mode", "estimate", "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert time.monotonic() - started < 60


def test_a_model_path_too_long_for_the_file_system_is_read_as_a_name_not_a_crash(tmp_path, kvcheck) -> None:
    # os.stat raised ENAMETOOLONG while kvcheck looked for the path beside the manifest: exit 4
    from tests.conftest import EXAMPLES

    example = EXAMPLES / "single-server"
    (tmp_path / "llama-3.1-8b-instruct.config.json").write_bytes(
        (example / "llama-3.1-8b-instruct.config.json").read_bytes())
    manifest = tmp_path / "m.yaml"
    manifest.write_text((example / "manifest.yaml").read_text(encoding="utf-8").replace(
        "path: meta-llama/Llama-3.1-8B-Instruct", "path: " + "a-" * 5_000), encoding="utf-8")
    result = kvcheck("verify", str(manifest), "--mode", "estimate", "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert "internal error" not in result.stderr

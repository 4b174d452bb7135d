"""Linear-time scanners for the secret shapes `kvcheck.redact` hides in free text.

Each reproduces one regular expression the redactor used before (kept in tests/security/test_redact_speed.py
as the reference they are checked against), without its backtracking: the old patterns retried a
`[A-Za-z0-9_.-]*` run from every position of a long run, quadratic (or worse) in its length, and every
report and stderr line goes through them. Here each run of name characters is read once: the leftmost
place a secret's name can start in a run is the run's start (or the quote before it), and when that
start does not make a secret, no later start in the same run does either.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
_RUN = re.compile(r"[A-Za-z0-9_.\-]++")
_SECRET_WORD = re.compile(r"api[_-]?key|secret|passw(?:or)?d|credential|private[_-]?key", re.I)
_FLAG_WORD = re.compile(r"api-key|secret|password|passwd|credential|private-key", re.I)
# what follows a name: `: value`, `= 'value'`, ... (the value never backtracks)
_ASSIGN_TAIL = re.compile(r"(?P<sep>\s*+[:=]\s*+)(?P<value>'[^']*'|\"[^\"]*\"|[^\s,}\]'\"]++)")
_FLAG_START = re.compile(r"--(?P<word>[A-Za-z0-9_.\-]*+)")
_FLAG_TAIL = re.compile(r"(?P<sep>[ =])(?P<value>'[^']*'|\"[^\"]*\"|\S++)")
_SCHEME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+.-")
_USERINFO_AT = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*+://)(?P<userinfo>[^/?#@\s'\"]++)@")

# (name, separator, value) -> the text that replaces `name sep value`
Replace = Callable[[str, str, str], str]


def _assigned_name(word: str) -> bool:
    """A key such as `api_key`, `HF_TOKEN`, `db.password` (the old pattern's three alternatives)."""
    if _SECRET_WORD.search(word):
        return True
    lowered = word.lower()
    return lowered.endswith("token") and (len(word) == 5 or word[-6] in "_.-")


def _flag_name(word: str) -> bool:
    """A flag such as `--admin-api-key`, `--token`, `--hf-token` (the word after `--`)."""
    if _FLAG_WORD.search(word):
        return True
    lowered = word.lower()
    return lowered == "token" or lowered.endswith("-token")


def sub_assigned(text: str, replace: Replace) -> str:
    """`api_key=x`, `'hf_token': 'x'`, `API_KEY: x`: each secret-named key's value through `replace`."""
    out: list[str] = []
    last = pos = 0
    while (run := _RUN.search(text, pos)) is not None:
        start, end = run.span()
        word = run[0]
        if not _assigned_name(word):
            pos = end
            continue
        quote = text[start - 1] if start > last and text[start - 1] in "'\"" else ""
        key_start, tail_at = start, end
        if quote and text[end : end + 1] == quote:
            key_start, tail_at = start - 1, end + 1
        tail = _ASSIGN_TAIL.match(text, tail_at)
        if tail is None and tail_at != end:  # a lone quote: the name alone may still be assigned
            key_start, tail_at = start, end
            tail = _ASSIGN_TAIL.match(text, tail_at)
        if tail is None:
            pos = end
            continue
        out.append(text[last:key_start])
        out.append(replace(text[key_start:tail_at], tail["sep"], tail["value"]))
        last = pos = tail.end()
    out.append(text[last:])
    return "".join(out)


def sub_flags(text: str, replace: Replace) -> str:
    """`--api-key x`, `--admin-api-key=x`, `--hf-token 'x'`: each secret flag's value through `replace`."""
    out: list[str] = []
    last = pos = 0
    while (flag := _FLAG_START.search(text, pos)) is not None:
        tail = _FLAG_TAIL.match(text, flag.end())
        if tail is None or not _flag_name(flag["word"]):
            pos = max(flag.end(), flag.start() + 1)  # a later `--` in the same run cannot do better
            continue
        out.append(text[last : flag.start()])
        out.append(replace(flag[0], tail["sep"], tail["value"]))
        last = pos = tail.end()
    out.append(text[last:])
    return "".join(out)


def _word_char(char: str) -> bool:
    return char.isalnum() or char == "_"


def userinfo_matches(text: str) -> Iterator[re.Match[str]]:
    """Every `scheme://userinfo@` in `text`, left to right and not overlapping, as the old pattern found them."""
    if "://" not in text:
        return
    last = pos = 0
    while (colon := text.find("://", pos)) != -1:
        begin = colon
        while begin > last and text[begin - 1] in _SCHEME_CHARS:
            begin -= 1
        # the old pattern's start: the first letter of the run that follows a non-word character
        start = next(
            (
                i
                for i in range(begin, colon)
                if text[i].isascii() and text[i].isalpha() and (i == 0 or not _word_char(text[i - 1]))
            ),
            None,
        )
        match = _USERINFO_AT.match(text, start) if start is not None else None
        if match is None:
            pos = colon + 1
            continue
        yield match
        last = pos = match.end()


def sub_userinfo(text: str, replace: Callable[[str], str]) -> str:
    """`scheme://user:password@host`: the user info of every URL through `replace(scheme)`."""
    out: list[str] = []
    last = 0
    for match in userinfo_matches(text):
        out.append(text[last : match.start()])
        out.append(replace(match["scheme"]))
        last = match.end()
    out.append(text[last:])
    return "".join(out)

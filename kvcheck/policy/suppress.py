"""Suppressions (inline comments, an ignore file) and the baseline: what lets a known finding stand
without failing the gate, each with its reason, never silently.

- An inline comment `# kvcheck: ignore KV205 until=2027-01-31 reason=...` on the line a finding points
  at, or alone on the line above it.
- An ignore file (`--ignore-file .kvcheck-ignore.yaml`): entries with `rule`, `reason`, optional
  `until`, `role`, `file`, `line`.
- A baseline (`--baseline FILE`, `--write-baseline FILE`): the findings a fleet had when it adopted the
  gate, by a stable identity (rule, role, file, the message with its figures blanked), never the line.

A reason is required. A suppression past its `until` date no longer suppresses and is itself a finding
(KV601) that fails. KV3xx findings (a role that could not be checked) can never be suppressed or
baselined: kvcheck fails closed, and says so as an input error (exit 2) when a suppression names one.
Suppressed findings stay in the report (Report.suppressions), so every format can show them. A live
suppression that covered nothing is KV602 and a baseline entry left over KV603 (info: they never fail).
"""

from __future__ import annotations

import datetime as dt
import difflib
import json
import os
import re
import stat
import tempfile
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from kvcheck.errors import InputError
from kvcheck.inputs.comments import comment_columns
from kvcheck.io.jsontext import loads as json_loads
from kvcheck.model import Finding, Location, RoleTarget, Suppressed
from kvcheck.policy.registry import define_rule, finding

KV601 = define_rule(
    "KV601",
    "error",
    "a suppression has expired",
    """An inline `# kvcheck: ignore` comment or an ignore-file entry carries an `until` date that has
    passed: it no longer suppresses its finding, and the gate fails until the finding is fixed or the
    suppression is renewed with a new date and reason. The finding names the suppression's line and its
    date. It cannot be ignored, suppressed or baselined.""",
)

KV602 = define_rule(
    "KV602",
    "info",
    "a suppression matched no finding",
    """An inline `# kvcheck: ignore` comment or an ignore-file entry covered no finding in this run: the
    finding it was written for is fixed, or it names the wrong rule, role, file or line. It is reported
    (as info: it never fails, also not with `--strict`) so that suppressions do not outlive their reason;
    remove it, or correct what it names. A run that checks fewer roles (`--role`) or another mode than
    the one the suppression was written for may leave it unused.""",
)

KV603 = define_rule(
    "KV603",
    "info",
    "a baseline entry matched no finding",
    """A `--baseline` file holds a finding this run no longer produces (fixed, or its rule, role, file
    or message changed). It is reported as info (it never fails); rewrite the baseline with
    `--write-baseline FILE` to drop it, so that the baseline cannot silently cover the same finding if
    it comes back.""",
)

BASELINE_SCHEMA = "kvcheck/baseline/v1"
MAX_FILE_BYTES = 16 * 1024 * 1024  # an ignore file, a baseline, a manifest scanned for comments
_CODE = re.compile(r"^KV[0-9]{3}$")
# a comment (kvcheck/inputs/comments.py: where YAML or the shell starts one) that reads `# kvcheck:`
_COMMENT = re.compile(r"#\s*kvcheck\s*:(?P<rest>.*)$")
_INLINE_KEYS = ("until", "reason")
_FILE_KEYS = ("rule", "reason", "until", "role", "file", "line")
_BASELINE_KEYS = ("rule", "role", "file", "message")
# never suppressible: a role that could not be checked (fail closed) and a suppression that expired
_NEVER = "KV3"
_ABOUT_SUPPRESSIONS = ("KV602", "KV603")  # findings about the suppressions themselves


def today() -> dt.date:
    """The date suppressions are judged on (UTC, so a CI runner's time zone does not move it)."""
    return dt.datetime.now(dt.UTC).date()


def _check_baseline_target(path: Path) -> None:
    """The baseline replaces the file at `path` (a rename): only a regular file, or nothing, may be there;
    renamed over, a device (`/dev/full` as root), a FIFO or a symbolic link would be replaced by it."""
    from kvcheck.io.textfile import describe

    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise InputError(f"--write-baseline {path}: {exc.strerror or exc}") from None
    if stat.S_ISLNK(mode):
        raise InputError(f"--write-baseline {path}: is a symbolic link: the baseline replaces the file at this "
                         "path", hint="give the path the link points to")
    if not stat.S_ISREG(mode):
        raise InputError(f"--write-baseline {path}: is {describe(path)}, not a regular file",
                         hint="give the path of a baseline file (it is created or replaced)")


@dataclass(frozen=True)
class GateOptions:
    """What the command line gives: an ignore file and a baseline to read, or a baseline to write."""

    ignore_file: Path | None = None
    baseline: Path | None = None
    write_baseline: Path | None = None


@dataclass(frozen=True)
class Suppression:
    """One suppression as written: the rules it covers, where it applies, why, until when."""

    rules: frozenset[str]
    reason: str
    kind: Literal["inline", "file"]
    source: Location  # where it is written
    until: dt.date | None = None
    file: str | None = None  # the file the finding points at (inline: the file the comment is in)
    lines: frozenset[int] = frozenset()  # inline: the lines it covers; file: empty, or the `line` given
    role: str | None = None

    def expired(self, on: dt.date) -> bool:
        return self.until is not None and on > self.until

    def covers(self, item: Finding) -> bool:
        if item.rule not in self.rules:
            return False
        if self.role is not None and item.role != self.role:
            return False
        if self.file is not None:
            if item.location is None or not _same_file(item.location.file, self.file):
                return False
            if self.lines and item.location.line not in self.lines:
                return False
        return True


def _same_file(a: str, b: str) -> bool:
    if os.path.normpath(a) == os.path.normpath(b):
        return True
    try:
        return Path(a).resolve() == Path(b).resolve()
    except OSError:
        return False


def _unsuppressible(code: str, where: str) -> InputError:
    return InputError(
        f"{where}: {code} cannot be suppressed: a KV3xx finding means a role could not be checked, "
        "and kvcheck fails closed (exit 3) whatever a suppression or baseline says",
        hint="fix what kept the role from being checked (see `kvcheck rules " + code + "`)",
    )


def _check_code(code: str, where: str) -> str:
    from kvcheck.policy.registry import all_rules

    code = code.strip()
    known = all_rules()
    if not _CODE.match(code) or code not in known:
        close = difflib.get_close_matches(code.upper(), list(known), n=1, cutoff=0.6)
        tip = f" (did you mean '{close[0]}'?)" if close else ""
        raise InputError(f"{where}: unknown rule code '{code}'{tip}")
    if code.startswith(_NEVER):
        raise _unsuppressible(code, where)
    if code == KV601.code:
        raise InputError(f"{where}: KV601 cannot be suppressed: an expired suppression fails until renewed or removed")
    if code in _ABOUT_SUPPRESSIONS:
        raise InputError(f"{where}: {code} cannot be suppressed: remove the suppression or baseline entry that "
                         "matched no finding")
    return code


def _parse_date(text: str, where: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text.strip())
    except ValueError:
        raise InputError(f"{where}: until={text.strip()!r} is not a date (YYYY-MM-DD, e.g. until=2027-01-31)") from None


def _unknown_key(key: str, allowed: Sequence[str], where: str, what: str) -> InputError:
    close = difflib.get_close_matches(key, list(allowed), n=1, cutoff=0.6)
    tip = f" (did you mean '{close[0]}'?)" if close else ""
    return InputError(f"{where}: unknown key '{key}' in {what}{tip}; allowed: {', '.join(allowed)}")


# ----------------------------------------------------------------------------------------- inline comments

def parse_inline(text: str, display: str) -> list[Suppression]:
    """Every `# kvcheck: ignore ...` comment of a file; InputError (exit 2, file:line) for a malformed one.

    Only comments count: a `# kvcheck:` inside a quoted value, a YAML block scalar or a here-document is the
    deployment's data, and suppresses nothing."""
    lines = text.splitlines()
    found: list[Suppression] = []
    for number, column in sorted(comment_columns(text, display).items()):
        line = lines[number - 1]
        match = _COMMENT.match(line, column)
        if match is None:
            continue
        where = f"{display}:{number}"
        rest = match.group("rest").strip()
        directive, _, tail = rest.partition(" ")
        if directive != "ignore":
            close = difflib.get_close_matches(directive, ["ignore"], n=1, cutoff=0.5)
            tip = " (did you mean 'ignore'?)" if close else ""
            raise InputError(f"{where}: unknown kvcheck directive '{directive}'{tip}; "
                             "write `# kvcheck: ignore KV205 until=2027-01-31 reason=...`")
        rules, until, reason = _parse_directive(tail.strip(), where)
        standalone = line[: match.start()].strip() == ""
        covered = {number}
        if standalone:
            following = next((n for n in range(number + 1, len(lines) + 1)
                              if lines[n - 1].strip() and not lines[n - 1].lstrip().startswith("#")), None)
            if following is not None:
                covered.add(following)
        found.append(Suppression(rules=rules, reason=reason, kind="inline", source=Location(display, number),
                                 until=until, file=display, lines=frozenset(covered)))
    return found


def _parse_directive(tail: str, where: str) -> tuple[frozenset[str], dt.date | None, str]:
    codes_text, _, options = tail.partition(" ")
    if not codes_text or "=" in codes_text:
        raise InputError(f"{where}: a kvcheck suppression names its rule codes first: "
                         "`# kvcheck: ignore KV205 until=2027-01-31 reason=...`")
    rules = frozenset(_check_code(code, where) for code in codes_text.split(",") if code.strip())
    until: dt.date | None = None
    reason = ""
    options = options.strip()
    while options:
        key, sep, value = options.partition("=")
        key = key.strip()
        if not sep or " " in key:
            raise InputError(f"{where}: expected key=value after the rule codes, not {options!r}")
        if key == "reason":
            reason = value.strip().strip("\"'").strip()  # the reason runs to the end of the line
            break
        if key not in _INLINE_KEYS:
            raise _unknown_key(key, _INLINE_KEYS, where, "a kvcheck suppression")
        date_text, _, options = value.partition(" ")
        until = _parse_date(date_text, where)
        options = options.strip()
    if not reason:
        raise InputError(f"{where}: a kvcheck suppression needs a reason: add reason=... (why the finding "
                         "may stand, e.g. reason=measured under peak load, see INC-123)")
    return rules, until, reason


# --------------------------------------------------------------------------------------------- ignore file

def load_ignore_file(path: Path) -> list[Suppression]:
    """The entries of an ignore file (YAML: `suppressions:` a list); InputError with file:line when malformed."""
    from kvcheck.io.textfile import read_text_file
    from kvcheck.io.yamlpos import load_yaml_with_positions

    display = str(path)
    text = read_text_file(path, display, kind="ignore file", max_bytes=MAX_FILE_BYTES)
    data, positions, issues = load_yaml_with_positions(text, display)
    if issues:
        raise InputError("\n".join(issue.render() for issue in issues))

    def at(*keys: Any) -> str:
        where = positions.of_key(tuple(keys))
        return f"{display}:{where[0]}:{where[1]}" if where else display

    if data is None:
        return []
    if not isinstance(data, dict):
        raise InputError(f"{at()}: an ignore file is a mapping with a `suppressions:` list")
    for key in data:
        if key != "suppressions":
            raise _unknown_key(str(key), ("suppressions",), at(key), "an ignore file")
    entries = data.get("suppressions") or []
    if not isinstance(entries, list):
        raise InputError(f"{at('suppressions')}: suppressions must be a list of entries")
    return [_ignore_entry(entry, index, display, at, positions.of_key(("suppressions", index)))
            for index, entry in enumerate(entries)]


def _ignore_entry(entry: Any, index: int, display: str, at: Any, place: tuple[int, int] | None) -> Suppression:
    """One entry of an ignore file, checked key by key."""
    where = at("suppressions", index)
    if not isinstance(entry, dict):
        raise InputError(f"{where}: each suppression is a mapping (rule, reason, until, role, file, line)")
    for key in entry:
        if key not in _FILE_KEYS:
            raise _unknown_key(str(key), _FILE_KEYS, at("suppressions", index, key), "a suppression")
    rule = entry.get("rule")
    codes = rule if isinstance(rule, list) else [rule] if rule is not None else []
    if not codes or not all(isinstance(code, str) for code in codes):
        raise InputError(f"{where}: a suppression needs `rule`: a rule code or a list of them")
    rules = frozenset(_check_code(code, at("suppressions", index, "rule")) for code in codes)
    reason = entry.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise InputError(f"{where}: a suppression needs a reason: `reason: why the finding may stand`")
    until_value = entry.get("until")
    until = (until_value if isinstance(until_value, dt.date) and not isinstance(until_value, dt.datetime)
             else _parse_date(str(until_value), at("suppressions", index, "until"))
             if until_value is not None else None)
    file = entry.get("file")
    line = entry.get("line")
    role = entry.get("role")
    if file is not None and not isinstance(file, str):
        raise InputError(f"{at('suppressions', index, 'file')}: file must be a path")
    if role is not None and not isinstance(role, str):
        raise InputError(f"{at('suppressions', index, 'role')}: role must be a role name")
    if line is not None and (isinstance(line, bool) or not isinstance(line, int) or line < 1 or file is None):
        raise InputError(f"{at('suppressions', index, 'line')}: line must be a line number (1 or more) "
                         "and needs `file`")
    if file is not None:  # relative to the ignore file's folder, as .gitignore paths are
        file = str((Path(display).parent / file).resolve())
    return Suppression(rules=rules, reason=reason.strip(), kind="file",
                       source=Location(display, place[0] if place else None), until=until, file=file,
                       lines=frozenset({line}) if line is not None else frozenset(), role=role)


# ------------------------------------------------------------------------------------------------ baseline

def _normalized(message: str) -> str:
    """The message with its figures blanked, so a pool that moved by a few tokens is the same finding."""
    return " ".join(re.sub(r"[0-9][0-9,._]*", "#", message).split())


def identity(rule: str, role: str | None, file: str | None, message: str) -> tuple[str, str | None, str | None, str]:
    """A finding's stable identity: rule, role, file (resolved) and normalized message; never the line,
    which shifts."""
    return rule, role, _resolved(file) if file else None, _normalized(message)


def _resolved(file: str) -> str:
    try:
        return str(Path(file).resolve())
    except OSError:
        return os.path.normpath(file)


def baselinable(item: Finding) -> bool:
    """What a baseline may hold: every finding that can fail, but KV3xx (fail closed) and KV601."""
    return item.severity != "info" and not item.rule.startswith(_NEVER) and item.rule != KV601.code


def load_baseline(path: Path, shown: dict[tuple[str, str | None, str | None, str], str] | None = None,
                  ) -> Counter[tuple[str, str | None, str | None, str]]:
    """The identities a baseline file holds, with how many findings of each; `shown` (when given) gets
    each identity's first entry as written (`KV205 [server] in m.yaml: message`), to name it."""
    from kvcheck.io.textfile import read_text_file

    display = str(path)
    text = read_text_file(path, display, kind="baseline", max_bytes=MAX_FILE_BYTES)
    try:
        data = json_loads(text)
    except ValueError as exc:  # not JSON (the decoder's place and message), or JSON past kvcheck's bounds
        where = f"{display}:{exc.lineno}:{exc.colno}: not JSON: {exc.msg}" if isinstance(exc, json.JSONDecodeError) \
            else f"{display}: cannot be read safely: {exc}"
        raise InputError(where) from None
    if not isinstance(data, dict) or data.get("schema") != BASELINE_SCHEMA or not isinstance(data.get("findings"), list):
        raise InputError(f"{display}: not a kvcheck baseline (an object with \"schema\": \"{BASELINE_SCHEMA}\" and "
                         "a \"findings\" list); write one with --write-baseline")
    for key in data:
        if key not in ("schema", "findings"):
            raise _unknown_key(str(key), ("schema", "findings"), display, "a baseline")
    held: Counter[tuple[str, str | None, str | None, str]] = Counter()
    for index, entry in enumerate(data["findings"]):
        where = f"{display}: findings[{index}]"
        if not isinstance(entry, dict):
            raise InputError(f"{where}: each entry is an object (rule, role, file, message)")
        for key in entry:
            if key not in _BASELINE_KEYS:
                raise _unknown_key(str(key), _BASELINE_KEYS, where, "a baseline entry")
        rule, role, file, message = (entry.get(key) for key in _BASELINE_KEYS)
        if not isinstance(rule, str) or not isinstance(message, str) \
                or not all(v is None or isinstance(v, str) for v in (role, file)):
            raise InputError(f"{where}: rule and message are text; role and file text or null")
        if rule.startswith(_NEVER):
            raise _unsuppressible(rule, where)
        # a file is written relative to the baseline's folder, so a run from another folder finds it
        key = identity(rule, role, str(Path(display).parent / file) if file else None, message)
        held[key] += 1
        if shown is not None and key not in shown:
            shown[key] = rule + (f" [{role}]" if role else "") + (f" in {file}" if file else "") + f": {message}"
    return held


def baseline_text(items: Iterable[Finding], folder: Path) -> str:
    """A baseline file in `folder` holding `items` (sorted, so a rewrite of the same findings is the same
    file); each finding's file is written relative to `folder`."""
    def where(item: Finding) -> str | None:
        if item.location is None or item.location.file == "-":
            return None
        return Path(os.path.relpath(_resolved(item.location.file), _resolved(str(folder)))).as_posix()

    entries = sorted(
        ({"rule": f.rule, "role": f.role, "file": where(f), "message": f.message} for f in items),
        key=lambda e: (e["rule"], e["role"] or "", e["file"] or "", e["message"]),
    )
    return json.dumps({"schema": BASELINE_SCHEMA, "findings": entries}, indent=2) + "\n"


# -------------------------------------------------------------------------------------------------- the gate

@dataclass
class Gate:
    """The suppressions and baseline of one run; the judge passes every finding through `split`."""

    options: GateOptions = field(default_factory=GateOptions)
    on: dt.date = field(default_factory=today)
    suppressions: list[Suppression] = field(default_factory=list)
    baseline: Counter[tuple[str, str | None, str | None, str]] = field(default_factory=Counter)
    scanned: set[str] = field(default_factory=set)
    written: list[Finding] = field(default_factory=list)  # --write-baseline: what the file will hold
    secrets: frozenset[str] = frozenset()
    used: set[int] = field(default_factory=set)  # the indexes in `suppressions` that covered a finding
    baseline_shown: dict[tuple[str, str | None, str | None, str], str] = field(default_factory=dict)

    @classmethod
    def open(cls, options: GateOptions | None, targets: Sequence[RoleTarget] = ()) -> Gate:
        """Read the ignore file, the baseline and the inline comments of the targets' files (before any
        engine boots, so a malformed suppression costs no measurement)."""
        options = options or GateOptions()
        if options.baseline is not None and options.write_baseline is not None:
            raise InputError("--baseline and --write-baseline are one or the other: --write-baseline FILE "
                             "rewrites the baseline from the current findings")
        if options.write_baseline is not None:
            _check_baseline_target(options.write_baseline)
        gate = cls(options=options)
        if options.ignore_file is not None:
            gate.suppressions.extend(load_ignore_file(options.ignore_file))
        if options.baseline is not None:
            gate.baseline = load_baseline(options.baseline, gate.baseline_shown)
        gate.scan(location.file for target in targets
                  for location in (target.location, *target.arg_locations.values()) if location is not None)
        return gate

    def scan(self, files: Iterable[str]) -> None:
        """Read the inline suppressions of files not read yet (stdin and missing files have none).

        Only the files the roles are declared in are read (manifests, deployment files): never a log
        or a server's answer, whose text is not the user's and must not suppress anything."""
        from kvcheck.io.textfile import read_text_file

        for file in files:
            if file in self.scanned or file == "-" or not os.path.isfile(file):
                self.scanned.add(file)
                continue
            self.scanned.add(file)
            text = read_text_file(Path(file), file, kind="file", max_bytes=MAX_FILE_BYTES)
            if "kvcheck" in text:
                self.suppressions.extend(parse_inline(text, file))

    def expired(self) -> list[Finding]:
        """A KV601 finding for every suppression past its date, at the suppression's line."""
        return [
            finding(
                KV601.code,
                s.role,
                f"the suppression of {', '.join(sorted(s.rules))} at {s.source.render()} expired on "
                f"{s.until.isoformat()} (reason given: {s.reason}); it no longer suppresses",
                hint="fix the finding, or renew the suppression with a new until= date and reason",
                location=s.source,
            )
            for s in self.suppressions if s.until is not None and s.expired(self.on)
        ]

    def split(self, items: Sequence[Finding]) -> tuple[list[Finding], list[Suppressed]]:
        """(findings that stand, findings a live suppression or the baseline covers)."""
        kept: list[Finding] = []
        held: list[Suppressed] = []
        for item in items:
            if item.rule.startswith(_NEVER) or item.rule == KV601.code:
                kept.append(item)
                continue
            index = next((i for i, s in enumerate(self.suppressions) if not s.expired(self.on) and s.covers(item)),
                         None)
            if index is not None:
                self.used.add(index)
                suppression = self.suppressions[index]
                held.append(Suppressed(finding=item, kind=suppression.kind, reason=suppression.reason,
                                       until=suppression.until.isoformat() if suppression.until else None,
                                       source=suppression.source))
                continue
            if self.options.write_baseline is not None and baselinable(item):
                self.written.append(item)
                held.append(self._baselined(item, self.options.write_baseline))
                continue
            key = self._identity(item)
            if self.options.baseline is not None and self.baseline[key] > 0 and baselinable(item):
                self.baseline[key] -= 1
                held.append(self._baselined(item, self.options.baseline))
                continue
            kept.append(item)
        return kept, held

    def unused(self) -> list[Finding]:
        """KV602 for every live suppression that covered no finding, at its line; KV603 for every baseline
        entry left over (call it once every finding has gone through `split`)."""
        out = [
            finding(
                KV602.code,
                s.role,
                f"the suppression of {', '.join(sorted(s.rules))} matched no finding in this run "
                f"(reason given: {s.reason})",
                hint="remove it if the finding is fixed, or correct the rule, role, file or line it names",
                location=s.source,
            )
            for i, s in enumerate(self.suppressions) if i not in self.used and not s.expired(self.on)
        ]
        path = self.options.baseline
        if path is not None:
            for key, left in sorted(self.baseline.items(), key=lambda kv: self.baseline_shown.get(kv[0], "")):
                if left <= 0:
                    continue
                count = f"{left} findings" if left > 1 else "a finding"
                out.append(finding(
                    KV603.code,
                    key[1],
                    f"the baseline {path} holds {count} this run did not produce: {self.baseline_shown.get(key, key[0])}",
                    hint=f"rewrite the baseline with --write-baseline {path} to drop what was fixed",
                    location=Location(str(path)),
                ))
        return out

    def _identity(self, item: Finding) -> tuple[str, str | None, str | None, str]:
        from kvcheck.redact import redact_text

        return identity(item.rule, item.role, item.location.file if item.location else None,
                        redact_text(item.message, self.secrets))

    @staticmethod
    def _baselined(item: Finding, path: Path) -> Suppressed:
        return Suppressed(finding=item, kind="baseline", reason="known when the baseline was written",
                          source=Location(str(path)))

    def finish(self) -> None:
        """--write-baseline: write the file (atomically; never over a file this run read as input)."""
        path = self.options.write_baseline
        if path is None:
            return
        from kvcheck.io.textfile import files_read
        from kvcheck.redact import redact_text

        try:
            found = path.stat()
        except OSError:
            found = None
        if found is not None and (found.st_dev, found.st_ino) in files_read():
            raise InputError(f"{path}: --write-baseline would replace an input of this run")
        redacted = [Finding(f.rule, f.severity, f.role, redact_text(f.message, self.secrets), None, f.location)
                    for f in self.written]
        _check_baseline_target(path)  # again: the run may have taken hours
        temporary: str | None = None
        try:
            # a new file of its own (O_EXCL, never through a link planted beside the baseline), then renamed
            handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".kvcheck-tmp", dir=path.parent)
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                out.write(baseline_text(redacted, path.parent))
            umask = os.umask(0o022)
            os.umask(umask)
            os.chmod(temporary, 0o666 & ~umask)  # as an ordinary new file (mkstemp's is 0600)
            os.replace(temporary, path)
        except OSError as exc:
            if temporary is not None and os.path.lexists(temporary):
                os.unlink(temporary)
            raise InputError(f"{path}: cannot write the baseline: {exc.strerror or exc}") from None

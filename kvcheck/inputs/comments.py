"""Where a file's comments are: the `#` that starts a comment on each line, as YAML or a shell reads it.

Inline suppressions (`# kvcheck: ignore ...`) must come from comments only. A `#` inside a quoted YAML value
(`served-model-name: "a # kvcheck: ignore KV101"`), a YAML block scalar or a quoted shell word is data: read
as a comment, any string a deployment carries could switch the gate off.
"""

from __future__ import annotations

import yaml

from kvcheck.inputs.deploy.shell import comment_offsets

_SHELL_SUFFIXES = (".sh", ".bash", ".sbatch", ".slurm", ".zsh")


def is_shell(text: str, filename: str) -> bool:
    """A shell script (a Slurm batch script): its suffix, a `#!` first line or `#SBATCH` lines."""
    if filename.lower().endswith(_SHELL_SUFFIXES) or text.startswith("#!"):
        return True
    return any(line.startswith("#SBATCH") for line in text.splitlines())


def comment_columns(text: str, filename: str) -> dict[int, int]:
    """{line number (1-based): the column (0-based) of the `#` that starts that line's comment}."""
    if not is_shell(text, filename):
        found = _yaml_comments(text)
        if found is not None:
            return found
    return _shell_comments(text)


def _yaml_comments(text: str) -> dict[int, int] | None:
    """Comments of a YAML text (None: it does not scan as YAML): a `#` at a line's start or after
    whitespace, outside every scalar (quoted, plain or block) the scanner reads."""
    spans: list[tuple[int, int]] = []
    try:
        for token in yaml.scan(text, Loader=yaml.SafeLoader):
            if isinstance(token, yaml.ScalarToken):
                spans.append((token.start_mark.index, token.end_mark.index))
    except yaml.YAMLError:
        return None
    spans.sort()
    found: dict[int, int] = {}
    offset = 0
    span = 0
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        column = 0
        while True:
            column = line.find("#", column)
            if column < 0:
                break
            index = offset + column
            while span < len(spans) and spans[span][1] <= index:
                span += 1
            inside = span < len(spans) and spans[span][0] <= index < spans[span][1]
            if not inside and (column == 0 or line[column - 1] in " \t"):
                found[number] = column
                break
            column += 1
        offset += len(line)
    return found


def _shell_comments(text: str) -> dict[int, int]:
    """Comments of a shell script, where kvcheck's shell reader (deploy/shell.py) finds them."""
    found: dict[int, int] = {}
    for offset in comment_offsets(text):
        number = text.count("\n", 0, offset) + 1
        found.setdefault(number, offset - (text.rfind("\n", 0, offset) + 1))
    return found

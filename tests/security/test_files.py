"""Hostile input files: YAML bombs, endless or blocking files, symlink loops. Each attack runs the real
command on a real file and must end in exit 2 with file:line, fast and in bounded memory."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from kvcheck.errors import InputError
from kvcheck.io.yamlpos import load_yaml_with_positions
from tests.security.helpers import PEAK_MIB_LIMIT, attack


def alias_bomb() -> str:
    """Nine levels of nine aliases each: 9**9 (387 million) strings from under 500 bytes."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    return "\n".join(lines) + "\n"


def merge_bomb() -> str:
    """Merge keys doubling a mapping 40 times over."""
    lines = ["m0: &m0 {k: 1}"] + [f"m{i}: &m{i} {{<<: [*m{i - 1}, *m{i - 1}]}}" for i in range(1, 40)]
    return "\n".join(lines) + "\n"


YAML_ATTACKS = {
    "alias bomb": (alias_bomb(), ":1:16: the YAML expands to too many values"),
    "recursive alias": ("roles: &r\n  x: *r\n", ":1:8: an alias refers to the collection that contains it"),
    "100k-deep flow": ("roles: " + "[" * 100_000 + "]" * 100_000 + "\n", ":1:108: YAML nested more than 100 levels"),
    "100k-deep block": ("roles:\n  " + "- " * 100_000 + "x\n", ":2:201: YAML nested more than 100 levels"),
}


@pytest.mark.parametrize(("text", "where"), YAML_ATTACKS.values(), ids=YAML_ATTACKS.keys())
def test_a_yaml_bomb_is_bad_input_with_its_line(tmp_path, text, where):
    path = tmp_path / "deploy.yaml"
    path.write_text(text)
    started = time.perf_counter()
    with pytest.raises(InputError) as caught:
        load_yaml_with_positions(text, str(path))
    loader_s = time.perf_counter() - started
    assert caught.value.message.startswith(f"{path}{where}")
    assert loader_s < 0.5  # the loader alone: well under a second, even on a loaded 2-core runner

    for args in (("verify", str(path), "--mode", "estimate"), ("audit", "--fleet", str(path)), ("import", str(path))):
        out = attack(*args, timeout=30, process=True)
        assert out.exit_code == 2, (args, out.stderr)
        assert f"kvcheck: error: {path}{where}" in out.stderr
        assert out.peak_mib < PEAK_MIB_LIMIT
        assert out.seconds < 10


def test_merge_keys_cannot_multiply_a_mapping(tmp_path):
    path = tmp_path / "deploy.yaml"
    path.write_text(merge_bomb())
    started = time.perf_counter()
    try:
        load_yaml_with_positions(path.read_text(), str(path))
    except InputError as exc:  # either refused with its line, or merged without multiplying
        assert exc.message.startswith(f"{path}:")
    assert time.perf_counter() - started < 0.5
    out = attack("verify", str(path), "--mode", "estimate", timeout=30, process=True)
    assert out.exit_code == 2
    assert out.peak_mib < PEAK_MIB_LIMIT


@pytest.fixture
def fifo(tmp_path) -> Path:
    path = tmp_path / "pipe.yaml"
    os.mkfifo(path)
    return path


@pytest.fixture
def symlink_loop(tmp_path) -> Path:
    (tmp_path / "a.yaml").symlink_to(tmp_path / "b.yaml")
    (tmp_path / "b.yaml").symlink_to(tmp_path / "a.yaml")
    return tmp_path / "a.yaml"


COMMANDS = {
    "verify": (("verify",), ("--mode", "estimate"), "manifest file"),
    "audit --fleet": (("audit", "--fleet"), (), "fleet file"),
    "logs": (("logs",), ("--context-length", "131072"), "log file"),
}


@pytest.mark.parametrize(("before", "after", "kind"), COMMANDS.values(), ids=COMMANDS.keys())
def test_dev_zero_is_refused_before_reading(before, after, kind):
    out = attack(*before, "/dev/zero", *after, timeout=30, process=True)
    assert out.exit_code == 2, out.stderr
    assert f"kvcheck: error: /dev/zero: is a character device, not a regular file; a {kind} must be a file" \
        in out.stderr
    assert out.peak_mib < PEAK_MIB_LIMIT
    assert out.seconds < 10


@pytest.mark.parametrize(("before", "after", "kind"), COMMANDS.values(), ids=COMMANDS.keys())
def test_a_fifo_without_writer_does_not_block(fifo, before, after, kind):
    out = attack(*before, str(fifo), *after, timeout=30)
    assert out.exit_code == 2, out.stderr
    assert f"kvcheck: error: {fifo}: is a FIFO (named pipe), not a regular file; a {kind} must be a file" in out.stderr
    assert out.seconds < 10


@pytest.mark.parametrize(("before", "after", "kind"), COMMANDS.values(), ids=COMMANDS.keys())
def test_a_symlink_loop_is_bad_input(symlink_loop, before, after, kind):
    out = attack(*before, str(symlink_loop), *after, timeout=30)
    assert out.exit_code == 2, out.stderr
    assert f"kvcheck: error: {symlink_loop}: a loop of symbolic links, not a {kind}" in out.stderr


@pytest.mark.parametrize(("before", "after", "kind"), list(COMMANDS.values())[:2], ids=list(COMMANDS)[:2])
def test_the_size_is_checked_before_reading(tmp_path, before, after, kind):
    huge = tmp_path / "huge.yaml"
    with huge.open("wb") as stream:  # a sparse 10 GiB file: costs nothing to make, all of it if read
        stream.truncate(10 * 2**30)
    out = attack(*before, str(huge), *after, timeout=30, process=True)
    assert out.exit_code == 2, out.stderr
    assert f"kvcheck: error: {huge}: 10,737,418,240 bytes is too large for a {kind}" in out.stderr
    assert out.peak_mib < PEAK_MIB_LIMIT
    assert out.seconds < 10

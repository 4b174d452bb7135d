"""Fleet files, command-line URLs and manifest --endpoint pairs become Endpoints, or exact input errors."""

from __future__ import annotations

import textwrap

import pytest

from kvcheck.errors import InputError
from kvcheck.inputs.fleet import endpoints_from_manifest, endpoints_from_urls, parse_fleet_file
from kvcheck.model import Endpoint, Location, RoleTarget


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_one_url_per_line_with_comments(tmp_path):
    path = write(
        tmp_path,
        "fleet.txt",
        """\
        # production fleet
        http://10.0.0.5:30000

        https://sglang-b.internal:8443/   # behind the gateway
          http://[fd00::7]:30000
        """,
    )
    assert parse_fleet_file(path) == [
        Endpoint("http://10.0.0.5:30000", "http://10.0.0.5:30000/", location=Location(str(path), 2, 1)),
        Endpoint(
            "https://sglang-b.internal:8443",
            "https://sglang-b.internal:8443/",
            location=Location(str(path), 4, 1),
        ),
        Endpoint("http://[fd00::7]:30000", "http://[fd00::7]:30000/", location=Location(str(path), 5, 3)),
    ]


def test_yaml_mapping_with_per_server_settings(tmp_path):
    path = write(
        tmp_path,
        "fleet.yaml",
        """\
        prefill-a: http://10.0.0.5:30000
        decode-a:
          url: http://10.0.0.6:30000
          role: decode
          context_length: 262144
        """,
    )
    assert parse_fleet_file(path) == [
        Endpoint("prefill-a", "http://10.0.0.5:30000/", location=Location(str(path), 1, 1)),
        Endpoint(
            "decode-a",
            "http://10.0.0.6:30000/",
            role="decode",
            context_length=262144,
            location=Location(str(path), 2, 1),
        ),
    ]


def test_yaml_is_recognised_without_a_yaml_suffix(tmp_path):
    path = write(tmp_path, "fleet", "a: http://h:1\n")
    assert [e.name for e in parse_fleet_file(path)] == ["a"]


def test_yaml_list_of_urls(tmp_path):
    path = write(tmp_path, "fleet.yml", "- http://h:1\n- http://h:2\n")
    assert [(e.name, e.location) for e in parse_fleet_file(path)] == [
        ("http://h:1", Location(str(path), 1, 3)),
        ("http://h:2", Location(str(path), 2, 3)),
    ]


def test_every_line_error_is_reported_with_its_place(tmp_path):
    path = write(
        tmp_path,
        "fleet.txt",
        """\
        http://good:1
        localhost:30000
        http://a:1 http://b:2
        http://good:1
        """,
    )
    with pytest.raises(InputError) as caught:
        parse_fleet_file(path)
    assert caught.value.message == (
        "3 errors in fleet file:\n"
        f"{path}:2:1: 'localhost:30000' is not an http(s) URL of a server\n"
        f"{path}:3:1: expected one URL per line, got 'http://a:1 http://b:2'\n"
        f"{path}:4:1: http://good:1 is listed twice (first as http://good:1)"
    )
    assert caught.value.exit_code == 2


def test_yaml_entry_errors_point_at_key_and_value(tmp_path):
    path = write(
        tmp_path,
        "fleet.yaml",
        """\
        a:
          url: http://h:1
          context_lenght: 1000
        b: {url: 42}
        c: {role: decode}
        d: {url: "http://h:4", context_length: -5}
        e: [http://h:5]
        """,
    )
    with pytest.raises(InputError) as caught:
        parse_fleet_file(path)
    assert caught.value.message == (
        "5 errors in fleet file:\n"
        f"{path}:3:3: a.context_lenght: unknown key (did you mean 'context_length'?); allowed: url, context_length, role\n"
        f"{path}:4:10: b.url: expected a URL, got 42 (int)\n"
        f"{path}:5:1: c: missing url\n"
        f"{path}:6:40: d.context_length: expected a positive number of tokens, got -5\n"
        f"{path}:7:4: e: expected a URL or a mapping with url, got ['http://h:5'] (list)"
    )


def test_yaml_syntax_error(tmp_path):
    path = write(tmp_path, "fleet.yaml", "a: [http://h:1\n")
    with pytest.raises(InputError, match=rf"^{path}:2:1: YAML syntax error"):
        parse_fleet_file(path)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("# only comments\n\n", "{path}: the fleet file lists no servers"),
        (
            "42: \n",
            "1 error in fleet file:\n{path}:1:4: 42: expected a URL or a mapping with url, got nothing",
        ),
        ("- 1\n", "1 error in fleet file:\n{path}:1:3: [0]: expected a URL, got 1 (int)"),
        (
            "plain text file\n",
            "1 error in fleet file:\n{path}:1:1: expected one URL per line, got 'plain text file'",
        ),
    ],
)
def test_empty_or_odd_files(tmp_path, content, message):
    path = write(tmp_path, "fleet.txt", content)
    with pytest.raises(InputError) as caught:
        parse_fleet_file(path)
    assert caught.value.message == message.format(path=path)


def test_missing_and_binary_files(tmp_path):
    with pytest.raises(InputError, match="no such fleet file"):
        parse_fleet_file(tmp_path / "absent.txt")
    binary = tmp_path / "fleet.bin"
    binary.write_bytes(b"http://h:1\x00\n")
    with pytest.raises(InputError, match="is a binary file, not a fleet file"):
        parse_fleet_file(binary)


def test_command_line_urls():
    assert endpoints_from_urls(["http://h:1/", "https://g"]) == [
        Endpoint("http://h:1", "http://h:1/"),
        Endpoint("https://g", "https://g/"),
    ]
    with pytest.raises(InputError) as caught:
        endpoints_from_urls(["h:1", "http://u:p@h:2"])
    assert caught.value.message == (
        "'h:1' is not an http(s) URL of a server\nhttp://h:2: credentials in the URL are not accepted"
    )


def _target(name: str) -> RoleTarget:
    return RoleTarget(
        name=name, context_length=262144, min_headroom=1.0, engine_version="0.5.23", args={}, argv_args=()
    )


def test_manifest_endpoint_pairs():
    targets = [_target("prefill"), _target("decode")]
    assert endpoints_from_manifest(targets, ["prefill=http://p:1", "decode = http://d:2"]) == [
        Endpoint("prefill", "http://p:1/", role="prefill", context_length=262144),
        Endpoint("decode", "http://d:2/", role="decode", context_length=262144),
    ]


def test_manifest_endpoint_pair_errors_in_one_pass():
    targets = [_target("prefill"), _target("decode")]
    with pytest.raises(InputError) as caught:
        endpoints_from_manifest(
            targets, ["prefil=http://p:1", "decode", "decode=http://d:2", "decode=http://d:3", "prefill=p:1"]
        )
    assert caught.value.message.splitlines() == [
        "--endpoint prefil=...: the manifest has no role 'prefil' (did you mean 'prefill'?); its roles are: prefill, decode",
        "--endpoint 'decode': expected ROLE=URL, e.g. prefill=http://10.0.0.5:30000",
        "--endpoint decode=...: role 'decode' is given twice",
        "--endpoint prefill=...: 'p:1' is not an http(s) URL of a server",
    ]

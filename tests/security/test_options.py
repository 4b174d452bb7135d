"""Options a hostile or careless caller can give: non-finite or absurd numbers, tokens no header can carry.
Each must be exit 2 with the option named, before anything is sent or started."""

from __future__ import annotations

import pytest

from tests.security.helpers import attack

URL = "http://127.0.0.1:9"  # the discard port: nothing may be sent there anyway

NUMBERS = {
    "audit --timeout nan": (("audit", URL, "--context-length", "131072", "--timeout", "nan"),
                            "Invalid value for '--timeout': 'nan' is not a finite number"),
    "audit --timeout inf": (("audit", URL, "--context-length", "131072", "--timeout", "inf"),
                            "Invalid value for '--timeout': inf is not in the range 0.1<=x<=86400.0."),
    "audit --timeout 1e308": (("audit", URL, "--context-length", "131072", "--timeout", "1e308"),
                              "Invalid value for '--timeout': 1e+308 is not in the range 0.1<=x<=86400.0."),
    "audit --context-length 1e20": (("audit", URL, "--context-length", "1e20"),
                                    "Invalid value for '--context-length': '1e20' is not a valid integer range."),
    "logs --context-length 1e20": (("logs", "-", "--context-length", "1e20"),
                                   "Invalid value for '--context-length': '1e20' is not a valid integer range."),
    "logs --min-headroom nan": (("logs", "-", "--min-headroom", "nan"),
                                "Invalid value for '--min-headroom': 'nan' is not a finite number"),
    "verify --timeout nan": (("verify", "docs/examples/single-server/manifest.yaml", "--timeout", "nan"),
                             "Invalid value for '--timeout': 'nan' is not a finite number"),
    "probe --request-timeout 1e308": (("probe", URL, "--context-length", "4096", "--pool", "8192",
                                       "--request-timeout", "1e308"),
                                      "Invalid value for '--request-timeout': 1e+308 is not in the range x<=86400.0."),
    "probe --max-duration inf": (("probe", URL, "--context-length", "4096", "--pool", "8192", "--max-duration",
                                  "inf"), "Invalid value for '--max-duration': inf is not in the range x<=604800.0."),
    "probe --rate nan": (("probe", URL, "--context-length", "4096", "--pool", "8192", "--rate", "nan"),
                         "Invalid value for '--rate': 'nan' is not a finite number"),
    "probe --context-length 10^20": (("probe", URL, "--context-length", "99999999999999999999", "--pool", "8192",
                                      "--dry-run"),
                                     "Invalid value for '--context-length': 99999999999999999999 is not in the "
                                     "range x<=2147483647."),
}


@pytest.mark.parametrize(("args", "message"), NUMBERS.values(), ids=NUMBERS.keys())
def test_absurd_numbers_are_bad_input(args, message):
    out = attack(*args, stdin="", timeout=30)
    assert out.exit_code == 2, out.stderr
    assert message in out.stderr


@pytest.mark.parametrize("command", [("audit", URL, "--context-length", "131072"),
                                     ("probe", URL, "--context-length", "4096", "--pool", "8192")])
@pytest.mark.parametrize("token", ["t\u00e9st-token", "abc\r\nX-Injected: 1", "tab\there"])
def test_a_token_no_header_can_carry_is_bad_input_and_never_printed(command, token):
    out = attack(*command, "--token-env", "KVCHECK_ATTACK_TOKEN", env={"KVCHECK_ATTACK_TOKEN": token}, timeout=30)
    assert out.exit_code == 2, out.stderr
    assert "--token-env KVCHECK_ATTACK_TOKEN: the token holds a character that cannot be sent in an HTTP header" \
        in out.stderr
    assert token.strip() not in out.stderr + out.stdout

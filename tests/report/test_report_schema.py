"""The JSON report's schema ships with kvcheck (`kvcheck schema --report`), and every JSON report a
test produces is validated against it (tests/conftest.py); this file checks the schema itself."""

from __future__ import annotations

import copy
import json

import jsonschema
import pytest

from tests.conftest import REPO_ROOT, run_kvcheck

INCIDENT = "docs/examples/incident/manifest.yaml"


def printed_schema() -> dict:
    done = run_kvcheck("schema", "--report")
    assert done.exit_code == 0, done.stderr
    return json.loads(done.stdout)


def incident_report() -> dict:
    done = run_kvcheck("verify", INCIDENT, "--mode", "estimate", "--format", "json", cwd=REPO_ROOT)
    assert done.exit_code == 1
    return json.loads(done.stdout)


def test_the_printed_schema_is_a_valid_draft_2020_12_schema_that_the_incident_report_follows() -> None:
    schema = printed_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["properties"]["schema"] == {"const": "kvcheck/report/v1"}
    jsonschema.Draft202012Validator(schema).validate(incident_report())


@pytest.mark.parametrize(
    ("change", "where"),
    [
        (lambda r: r.update(surprise=1), "surprise"),  # a top-level field the contract does not have
        (lambda r: r["roles"][0].pop("max_input_tokens"), "max_input_tokens"),  # a contract field missing
        (lambda r: r["roles"][0].update(status="ok"), "ok"),  # a status outside pass/fail/error
        (lambda r: r["findings"][0].update(rule="KV1"), "KV1"),
        (lambda r: r.update(exit_code=5), "5"),
        (lambda r: r["roles"][0].update(pool_tokens=-5), "-5"),
    ],
)
def test_a_report_outside_the_contract_is_refused(change, where: str) -> None:
    report = copy.deepcopy(incident_report())
    change(report)
    with pytest.raises(jsonschema.ValidationError, match=where):
        jsonschema.Draft202012Validator(printed_schema()).validate(report)

"""The rule catalogue: every rule kvcheck can report, imported from the module that defines it.

Each engine contributes its own rules (`Engine.rules()`), so the catalogue names no engine. A new
rule module adds its rules here; tests/policy/test_catalogue.py fails when a defined rule is missing.
`kvcheck rules`, docs/rules.md and the SARIF driver list the catalogue sorted by code.
"""

from __future__ import annotations

from kvcheck.backends.audit_rules import KV306, KV307, KV308, KV311
from kvcheck.backends.measure.rules import KV301, KV302, KV303, KV304, KV310, KV314, KV315, KV324
from kvcheck.engines import ENGINES, get_engine
from kvcheck.inputs.deploy.rules import KV317, KV318, KV319, KV501, KV502
from kvcheck.plan.rules import KV106
from kvcheck.policy.registry import Rule
from kvcheck.policy.rules import (
    KV101,
    KV102,
    KV103,
    KV104,
    KV107,
    KV110,
    KV111,
    KV112,
    KV201,
    KV202,
    KV203,
    KV204,
    KV205,
)
from kvcheck.policy.suppress import KV601, KV602, KV603
from kvcheck.probe.rules import (
    CROSS_TENANT,
    EMPTY_LENGTH_FINISH,
    FORMAT_REFUSED,
    INBOUND_REFUSED,
    INCOMPLETE,
    NON_400_REFUSAL,
    OPENAI_UNAVAILABLE,
    OVERLONG_ACCEPTED,
    PROMPT_ALTERED,
    SERVER_CRASHED,
    SILENT_REFUSAL,
    UNREACHABLE,
    UNSAFE_IDS,
)
from kvcheck.report.input_errors import KV001, KV300

INPUT_RULES = (KV001,)  # invalid input: exit 2, nothing was checked
POLICY_RULES = (KV101, KV102, KV103, KV104, KV107, KV110, KV111, KV112, KV201, KV202, KV203, KV204, KV205)
PLAN_RULES = (KV106,)
MEASURE_RULES = (KV300, KV301, KV302, KV303, KV304, KV310, KV314, KV315, KV324)
AUDIT_RULES = (KV306, KV307, KV308, KV311)
PROBE_RULES = (
    OVERLONG_ACCEPTED,
    PROMPT_ALTERED,
    EMPTY_LENGTH_FINISH,
    INBOUND_REFUSED,
    CROSS_TENANT,
    SILENT_REFUSAL,
    NON_400_REFUSAL,
    OPENAI_UNAVAILABLE,
    FORMAT_REFUSED,
    UNREACHABLE,
    INCOMPLETE,
    UNSAFE_IDS,
    SERVER_CRASHED,
)
DEPLOY_RULES = (KV317, KV318, KV319, KV501, KV502)
GATE_RULES = (KV601, KV602, KV603)

# The rules that hold whatever the engine.
NEUTRAL_RULES = (
    INPUT_RULES + POLICY_RULES + PLAN_RULES + MEASURE_RULES + AUDIT_RULES + PROBE_RULES + DEPLOY_RULES + GATE_RULES
)


def catalogue() -> tuple[Rule, ...]:
    """Every rule: the engine-neutral ones, then each registered engine's own, in registry order."""
    return NEUTRAL_RULES + tuple(rule for name in ENGINES for rule in get_engine(name).rules())

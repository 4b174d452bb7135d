"""The JSON Schema (draft 2020-12) of the JSON report, `kvcheck/report/v1` (`kvcheck schema --report`).

It states the contract (../shared/docs/contract.md, docs/ci.md): every field always present, `null`
where unknown, the values each enumerated field takes, and a verdict that agrees with the exit code
(exit 2, invalid input: mode `input`, no roles, a KV001 finding per problem). A role's `details` is the backend's own
evidence and stays open, but the typed members other layers set there (the plan, fit hints, the
pool range, the engine's context length and release) are described. The test suite validates every
JSON report any test produces against it (tests/conftest.py), so a field added to the report without
its schema fails the tests.
"""

from __future__ import annotations

from typing import Any

from kvcheck.model import REPORT_SCHEMA

_TOKENS = {"type": ["integer", "null"], "minimum": 0}
_STATUS = {"enum": ["pass", "fail", "error"]}
_TEXT_OR_NULL = {"type": ["string", "null"]}

_LOCATION = {
    "type": ["object", "null"],
    "required": ["file", "line", "column"],
    "additionalProperties": False,
    "properties": {
        "file": {"type": "string"},
        "line": {"type": ["integer", "null"], "minimum": 1},
        "column": {"type": ["integer", "null"], "minimum": 1},
    },
}

_FINDING_FIELDS = ["rule", "severity", "role", "message", "hint", "location"]
_FINDING_PROPERTIES: dict[str, Any] = {
    "rule": {"type": "string", "pattern": "^KV[0-9]{3}$"},
    "severity": {"enum": ["error", "warning", "info"]},
    "role": _TEXT_OR_NULL,
    "message": {"type": "string"},
    "hint": _TEXT_OR_NULL,
    "location": _LOCATION,
}
_FINDING = {
    "type": "object",
    "required": _FINDING_FIELDS,
    "additionalProperties": False,
    "properties": _FINDING_PROPERTIES,
}

_SUPPRESSION = {
    "type": "object",
    "required": [*_FINDING_FIELDS, "kind", "reason", "until", "source"],
    "additionalProperties": False,
    "properties": {
        **_FINDING_PROPERTIES,
        "kind": {"enum": ["inline", "file", "baseline"]},
        "reason": {"type": "string", "minLength": 1},
        "until": {"type": ["string", "null"], "format": "date"},
        "source": _LOCATION,
    },
}

_RANGE = {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2}

_OPTION = {
    "type": "object",
    "required": ["pool_tokens", "pool_range", "fits", "uncertain", "current", "note"],
    "properties": {
        "pool_tokens": _TOKENS,
        "pool_range": {"anyOf": [_RANGE, {"type": "null"}]},
        "fits": {"type": "boolean"},
        "uncertain": {"type": "boolean"},
        "current": {"type": "boolean"},
        "note": _TEXT_OR_NULL,
    },
}

_PLAN = {
    "type": ["object", "null"],
    "required": ["required_tokens", "min_headroom", "largest_context_tokens", "binding_limit", "pool_context_tokens",
                 "model_context_tokens", "uncertain", "memory_fraction", "mem_fraction_static", "tp_options",
                 "kv_dtype_options"],
    "additionalProperties": False,
    "properties": {
        "required_tokens": _TOKENS,
        "min_headroom": {"type": "number", "exclusiveMinimum": 0},
        "largest_context_tokens": _TOKENS,
        "binding_limit": {"enum": ["pool", "max_total_tokens", "model_context_length", "num_reserved_decode_tokens"]},
        "pool_context_tokens": _TOKENS,
        "model_context_tokens": _TOKENS,
        "uncertain": {"type": "boolean"},
        "memory_fraction": {"type": "object", "required": ["flag"],
                            "properties": {"flag": {"enum": ["mem-fraction-static", "gpu-memory-utilization", "VLLM_CPU_KVCACHE_SPACE", "kv-cache-memory-bytes"]}}},
        "mem_fraction_static": {"type": "object"},
        "tp_options": {"type": "array", "items": _OPTION},
        "kv_dtype_options": {"type": "array", "items": _OPTION},
    },
}

_DETAILS = {
    "type": "object",
    "properties": {
        "plan": _PLAN,
        "plan_error": {"type": "string"},
        "fit_hints": {"type": "array", "items": {"type": "string"}},
        "pool_range": _RANGE,
        "engine_context_len": {"type": "integer", "minimum": 0},
        "engine_version": {"type": "string"},
    },
}

_ROLE = {
    "type": "object",
    "required": ["name", "status", "pool_tokens", "required_tokens", "max_input_tokens", "source", "gpus", "argv",
                 "details"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string"},
        "status": _STATUS,
        "pool_tokens": _TOKENS,
        "required_tokens": _TOKENS,
        # a bound may be negative when a pool is tiny (SGLang's own max_req_input_len can be)
        "max_input_tokens": {"type": ["integer", "null"]},
        "source": _TEXT_OR_NULL,
        "gpus": {"type": ["array", "null"], "items": {"type": "integer", "minimum": 0}},
        "argv": {"type": ["array", "null"], "items": {"type": "string"}},
        "details": _DETAILS,
    },
}

REPORT_JSON_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://kvcheck.dev/schemas/report-v1.json",
    "title": "kvcheck report (kvcheck/report/v1)",
    "type": "object",
    "required": ["schema", "kvcheck_version", "command", "source", "mode", "verdict", "exit_code", "context_length",
                 "roles", "findings", "suppressed", "suppressions"],
    "additionalProperties": False,
    "properties": {
        "schema": {"const": REPORT_SCHEMA},
        "kvcheck_version": {"type": "string"},
        "command": {"enum": ["verify", "plan", "audit", "logs", "probe"]},
        "source": _TEXT_OR_NULL,
        "mode": {"type": "string"},
        "verdict": _STATUS,
        "exit_code": {"enum": [0, 1, 2, 3, 4]},
        "context_length": _TOKENS,
        "roles": {"type": "array", "items": _ROLE},
        "findings": {"type": "array", "items": _FINDING},
        "suppressed": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["rule", "count"],
                "additionalProperties": False,
                "properties": {"rule": {"type": "string"}, "count": {"type": "integer", "minimum": 1}},
            },
        },
        # the findings of `suppressed` that an inline comment, the ignore file or the baseline covers
        "suppressions": {"type": "array", "items": _SUPPRESSION},
    },
    # the verdict and the exit code agree; exit 2 (invalid input) is a report without roles whose
    # findings say what was wrong (KV001), so a CI format shows it where a check result would be
    "allOf": [
        {"if": {"properties": {"exit_code": {"const": 0}}}, "then": {"properties": {"verdict": {"const": "pass"}}}},
        {"if": {"properties": {"exit_code": {"const": 1}}}, "then": {"properties": {"verdict": {"const": "fail"}}}},
        {"if": {"properties": {"exit_code": {"enum": [2, 3]}}},
         "then": {"properties": {"verdict": {"const": "error"}}}},
        {
            "if": {"properties": {"exit_code": {"const": 2}}},
            "then": {"properties": {
                "mode": {"const": "input"},
                "roles": {"maxItems": 0},
                "findings": {"minItems": 1, "contains": {"properties": {"rule": {"pattern": "^KV0"},
                                                                       "severity": {"const": "error"}}}},
            }},
        },
    ],
}

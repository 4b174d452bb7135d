"""Write docs/rules.md from the rule catalogue (kvcheck/policy/catalogue.py), so it cannot drift from the code.

Usage: python tools/gen_rules_doc.py [--check]
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kvcheck.policy.registry import all_rules  # noqa: E402

HEADER = """# Rule codes

Every finding kvcheck reports carries a stable rule code. Ranges: KV0xx invalid input (exit 2:
nothing was checked), KV1xx capacity, KV2xx engine
safety, KV3xx measurement (an error means the role could not be checked: exit 3), KV4xx the live
probe, KV5xx deployment files. A manifest can skip rules (`policy.ignore`) or change their severity (`policy.severity`),
except the KV3xx errors: a role that could not be checked never passes, so those can be neither
ignored nor downgraded (kvcheck rejects such a manifest). `--strict` makes warnings fail too.
`kvcheck rules` lists the codes and `kvcheck rules KV101` explains one.

This page is generated from the code (`python tools/gen_rules_doc.py`); a test fails when it is
out of date.

| code | default severity | finding |
| --- | --- | --- |
"""


def render() -> str:
    rules = all_rules()
    out = [HEADER]
    out.extend(f"| [{r.code}](#{r.code.lower()}) | {r.severity} | {r.title} |\n" for r in rules.values())
    for rule in rules.values():
        out.append(f"\n## {rule.code}\n\n**{rule.severity}**: {rule.title}.\n\n{rule.doc}\n")
    return "".join(out)


def main() -> int:
    target = ROOT / "docs" / "rules.md"
    text = render()
    if "--check" in sys.argv:
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            print("docs/rules.md is out of date: run python tools/gen_rules_doc.py", file=sys.stderr)
            return 1
        return 0
    target.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The planner's rule: advice findings, informational, never blocking a rollout."""

from __future__ import annotations

from kvcheck.policy.registry import define_rule

KV106 = define_rule(
    "KV106",
    "info",
    "planner advice",
    """`kvcheck plan` reports, per role, what the estimate model says would fit: the largest
    context the predicted pool holds, the mem-fraction-static range that holds the window, and
    the TP degree or KV-cache dtype that would. The figures are predictions (estimate mode);
    where the window lies inside the estimate's uncertainty range the advice says "might not
    fit; measure". These findings never fail a check; the capacity rules (KV101 and the rest)
    still judge the manifest as written. Fix: apply a recommended setting, then confirm it with
    `kvcheck verify` on the role's GPUs.""",
)

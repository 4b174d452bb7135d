"""Choosing the roles a command checks (--role), with the same input-error wording everywhere."""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from kvcheck.errors import InputError
from kvcheck.model import RoleTarget


def select_roles(targets: Sequence[RoleTarget], names: Sequence[str], source: str) -> list[RoleTarget]:
    """The roles named with --role (all when none), in manifest order; unknown names are input errors."""
    if not names:
        return list(targets)
    known = [t.name for t in targets]
    unknown = [n for n in names if n not in known]
    if unknown:
        parts = []
        for name in unknown:
            close = difflib.get_close_matches(name, known, n=1)
            parts.append(f"'{name}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
        raise InputError(
            f"{source}: no role {', '.join(parts)}; the manifest's roles are: {', '.join(known)}"
        )
    return [t for t in targets if t.name in names]

"""``EnvContext``: what a run tells the envs it builds (audit log, run id, tool permissions).

:func:`agentic_rl.envs.make` takes ``context=EnvContext(...)`` and hands it to the env's factory
as its ``context`` keyword. The rule, for built-in and user envs alike (``module:Class`` ids,
``agentic_rl.envs`` entry points): **a factory that has a parameter named ``context`` receives
the context; a factory without one is built without it** (it never sees the run's audit path or
run id). An env uses the fields it needs and ignores the others.

For records and calls written before the context existed, ``make`` folds the keywords
``permissions``, ``audit_path`` and ``run_id`` into the context of a factory that takes one
(they override the context's fields); a factory without a ``context`` parameter gets them as
plain keywords, and one that does not take them is a :class:`TypeError` naming them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

__all__ = ["CONTEXT_FIELDS", "EnvContext"]


@dataclasses.dataclass(frozen=True)
class EnvContext:
    """The run's side of an env's construction (an immutable value; the default: no run).

    Attributes:
        audit_path: JSON-lines audit log of every tool call (``RUN_DIR/audit.jsonl`` in a
            training run); None audits nothing.
        run_id: written into every audit record ("" outside a run).
        permissions: the ``[tools.permissions]`` table (see
            :meth:`~agentic_rl.tools.governance.permissions.PermissionPolicy.from_dict`); None
            keeps the env's own default policy.
    """

    audit_path: str | None = None
    run_id: str = ""
    permissions: dict[str, Any] | None = None

    def with_fields(self, fields: Mapping[str, Any]) -> EnvContext:
        """This context with ``fields`` (names of :data:`CONTEXT_FIELDS`) replaced.

        Raises:
            TypeError: a name that is not a field.
        """
        return dataclasses.replace(self, **fields)


#: the names of :class:`EnvContext`'s fields (also accepted as ``make`` keywords, see above)
CONTEXT_FIELDS = tuple(f.name for f in dataclasses.fields(EnvContext))

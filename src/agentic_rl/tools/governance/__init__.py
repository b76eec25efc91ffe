"""Call governance: the one execution path of a tool call (:class:`~agentic_rl.tools.governance.executor.ToolExecutor`:
permission check, execution, audit record, observation), the permission policy, the audit log
and risk detectors. Imports only the standard library, :mod:`agentic_rl.types` and
:mod:`agentic_rl.tools.definition`."""

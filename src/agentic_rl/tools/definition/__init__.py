"""What a tool is and how a call is read: :class:`~agentic_rl.tools.definition.tool.Tool` with its
JSON Schema, the tool-call parser, the system-prompt rendering of tool schemas, and the
built-in calculator tool. Imports only the standard library and :mod:`agentic_rl.types`."""

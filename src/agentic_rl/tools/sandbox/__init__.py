"""The sandbox tool code runs in: bubblewrap namespaces and limits (:mod:`~agentic_rl.tools.sandbox.bwrap`),
the seccomp filter, whole-sandbox limits, an episode's sandbox with its stateful ``python`` tool
and workspace file tools (:class:`~agentic_rl.tools.sandbox.episode.EpisodeSandbox`), snapshots,
and the bundle of sandbox, executor and risk detectors an env holds
(:class:`~agentic_rl.tools.sandbox.env_tools.SandboxedTools`)."""

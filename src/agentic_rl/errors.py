"""User-facing errors of agentic-rl.

Every error a user can cause with a wrong input (config key, env id, model path, run directory)
is an ``AgenticRLError``; the CLI prints its message as one line and exits with status 2
instead of a traceback.
"""


class AgenticRLError(Exception):
    """Base class of errors caused by user input; the message names the offending item."""


class ConfigError(AgenticRLError):
    """A config file, key or value is wrong (the message names the key and the file)."""


class UnknownEnvError(AgenticRLError, KeyError):
    """An environment id is not registered (the message names the closest ids and where the
    list is).

    Args:
        message: the error's text.
        reason: why an id of a family's form is not one of its members when that is more than
            "no such member" (e.g. "search needs a retrieval server"); the registry keeps it
            when it rewrites a family's error.
    """

    def __init__(self, message: str = "", reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0]) if self.args else ""


class ModelNotFoundError(AgenticRLError):
    """A model path does not exist or holds no loadable model."""


class RunDirError(AgenticRLError):
    """A run directory is missing or holds no checkpoint to resume from."""


class EnvUnavailableError(AgenticRLError):
    """A registered env cannot be made here: its optional package or its offline assets (a word
    corpus, generated game files) are missing. The message names what is missing and how to get it."""

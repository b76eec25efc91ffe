"""Stateful Python interpreter that runs inside the sandbox (a notebook-kernel-like worker).

Started by :class:`agentic_rl.tools.python_tool.PythonInterpreter` as
``python -s -P _sandbox_worker.py SETTINGS_JSON MARKER``; imports only the standard library.

Start-up: apply the resource limits (soft = hard, so user code cannot raise them), drop to the
episode's user id when one is given (needs CAP_SETUID/CAP_SETGID, granted by bwrap when the
host runs as root), move the protocol pipes to private non-inheritable descriptors, point
descriptor 0 at /dev/null and descriptors 1 and 2 at a capture file in the private /tmp, then
write ``{"ready": true}``.

Protocol (JSON lines): request ``{"code": str}``; response ``{"stdout", "stderr", "value",
"exception", "memory_exceeded", "truncated", "exit"}``. ``exit`` is not null when the code
raised ``SystemExit``: the worker answers and then exits with that status. ``MARKER`` is unused
by the worker; it is only there so that the host can find the episode's processes.
"""

import ast
import builtins
import io
import json
import os
import resource
import sys
import traceback

_CAPTURE = "/tmp/.agentic_rl_fd_output"


class _CappedWriter(io.TextIOBase):
    """A text stream that keeps the first ``cap`` characters and counts the rest."""

    def __init__(self, cap):
        super().__init__()
        self.cap, self.parts, self.kept, self.dropped = cap, [], 0, 0

    def write(self, s):
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        room = self.cap - self.kept
        if room > 0:
            self.parts.append(s[:room])
            self.kept += min(room, len(s))
        self.dropped += max(0, len(s) - max(room, 0))
        return len(s)

    def writable(self):
        return True

    @property
    def encoding(self):
        return "utf-8"

    def getvalue(self):
        return "".join(self.parts)


def _apply_limits(limits):
    names = {"cpu": resource.RLIMIT_CPU, "as": resource.RLIMIT_AS,
             "nproc": resource.RLIMIT_NPROC, "fsize": resource.RLIMIT_FSIZE,
             "nofile": resource.RLIMIT_NOFILE}
    for key, value in limits.items():
        if value is not None:
            resource.setrlimit(names[key], (int(value), int(value)))


def _setup(settings):
    proto_in = os.fdopen(os.dup(0), "rb", buffering=0)
    proto_out = os.fdopen(os.dup(1), "wb")
    _apply_limits(settings["limits"])
    uid = settings.get("uid")
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    capture = os.open(settings.get("capture", _CAPTURE),
                      os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
    os.dup2(capture, 1)
    os.dup2(capture, 2)
    os.close(capture)
    return proto_in, proto_out


def _fd_output(path, cap):
    """Return (text, dropped) written to descriptors 1/2 during the call, then empty the file."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            data = f.read(cap) if size else b""
        if size:
            os.ftruncate(1, 0)
        return data.decode("utf-8", "replace"), max(0, size - len(data))
    except OSError:
        return "", 0


def _run(code, namespace, cap):
    out, err = _CappedWriter(cap), _CappedWriter(cap)
    reply = {"value": None, "exception": None, "memory_exceeded": False, "exit": None}
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        tree = ast.parse(code, "<cell>", "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, "<cell>", "exec"), namespace)
        if last is not None:
            result = eval(compile(last, "<cell>", "eval"), namespace)
            if result is not None:
                text = repr(result)
                reply["value"] = text if len(text) <= cap else text[:cap] + "…[truncated]"
    except SystemExit as exc:
        status = exc.code
        if status is None or isinstance(status, int):
            reply["exit"] = status or 0
        else:
            print(status, file=err)
            reply["exit"] = 1
    except BaseException as exc:  # noqa: BLE001 - every error is an observation
        reply["exception"] = type(exc).__name__
        reply["memory_exceeded"] = isinstance(exc, MemoryError)
        try:
            if isinstance(exc, SyntaxError):
                err.write("".join(traceback.format_exception_only(type(exc), exc)))
            else:
                tb = exc.__traceback__.tb_next if exc.__traceback__ else None
                err.write("".join(traceback.format_exception(type(exc), exc, tb)))
        except MemoryError:
            err.write(f"{type(exc).__name__}\n")
        del exc
    finally:
        sys.stdout, sys.stderr = saved
    return out, err, reply


def main():
    settings = json.loads(sys.argv[1])
    cap = int(settings["max_output_chars"])
    capture = settings.get("capture", _CAPTURE)
    proto_in, proto_out = _setup(settings)
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    proto_out.write(b'{"ready": true}\n')
    proto_out.flush()
    while True:
        line = proto_in.readline()
        if not line:
            return
        code = json.loads(line)["code"]
        out, err, reply = _run(code, namespace, cap)
        fd_text, fd_dropped = _fd_output(capture, cap)
        stdout = out.getvalue() + fd_text
        reply["stdout"] = stdout[:cap]
        reply["stderr"] = err.getvalue()
        reply["truncated"] = bool(out.dropped or err.dropped or fd_dropped or len(stdout) > cap)
        proto_out.write(json.dumps(reply).encode() + b"\n")
        proto_out.flush()
        if reply["exit"] is not None:
            os._exit(reply["exit"])


if __name__ == "__main__":
    main()

"""Stateful Python interpreter that runs inside the sandbox (a notebook-kernel-like worker).

Started by :class:`agentic_rl.tools.sandbox.python_tool.PythonInterpreter` as
``python -s -P _sandbox_worker.py SETTINGS_JSON MARKER`` (``MARKER`` only lets the host find the
episode's processes); imports only the standard library. Both processes below take
``oom_score_adj`` from the settings; on a root host the supervisor empties the capability
bounding set at start and, once the kernel is forked, keeps only ``CAP_KILL`` (bwrap gave it
``CAP_SETUID``, ``CAP_SETGID``, ``CAP_SETPCAP`` and ``CAP_KILL`` only). Two processes, so that
the program cannot reach the channel its results travel on:

- the **supervisor** (this script's first process) talks to the host over two dedicated pipe
  descriptors (``settings["protocol_fds"]``, passed in with ``pass_fds``; the sandbox's
  descriptors 0/1 are ``/dev/null``). It runs no user code, keeps no resource limits, and is
  non-dumpable, so a program of the same uid can neither open its ``/proc/PID/fd`` nor ptrace
  it (when the host is root the program also runs as another uid).
- the **kernel** (a child forked at start-up) applies the resource limits (soft = hard, except
  ``RLIMIT_CPU``: hard = soft + 1 s, so that the limit delivers ``SIGXCPU`` and not a bare
  ``SIGKILL``; ``RLIMIT_CORE`` = 0), drops to the episode's uid when one is given (every
  capability goes; checked), enters ``/workspace``, points descriptor 0 at ``/dev/null`` and
  descriptors 1 and 2 at two pipes read by the supervisor, and runs the code.

Exec mode (``settings["exec"]``, an MCP server's launcher): the same limits, bounding set, uid
(and ``gid``, ``umask``) and directory, then ``execv`` of the server.

Host <-> supervisor (JSON lines): request ``{"code": str}``; reply ``{"stdout", "stderr",
"value", "exception", "memory_exceeded", "truncated", "dropped", "exit", "signal",
"cpu_exceeded"}``, after a first ``{"ready": true}``. What the supervisor reports is what it
observed itself: stdout and stderr are the bytes the kernel (and every process it started) wrote
to descriptors 1 and 2, capped here at ``max_output_chars`` each; ``dropped`` is ``[characters,
UTF-8 bytes]`` of the output the caps cut (of stdout, stderr and the value together: what the
supervisor read and did not keep, plus what the kernel's ``sys.stdout``/``sys.stderr`` and value
cap say they dropped before writing), so the host can tell the policy the real size;
``exit``/``signal`` come from ``wait4`` on the kernel (not from what the program says),
``cpu_exceeded`` means it was killed by ``SIGXCPU``/``SIGKILL`` after using ``RLIMIT_CPU``
seconds of CPU (its rusage, less a few ticks). A reply with ``exit`` or ``signal`` not null
means the kernel is gone; the supervisor exits after sending it.

Supervisor <-> kernel: request ``{"code", "token"}`` with a fresh random token per call; the
kernel answers ``{"token", "value", "exception", "memory_exceeded", "exit", "dropped"}``. The program can
write to that pipe (it shares the kernel's process), so the supervisor treats the answer as a
claim: lines without the call's token are dropped, so blind forgery and replies left over from
an earlier call change nothing, the value and exception name are capped, and a claimed exit
counts only once ``wait4`` sees it. A program that reads the token from its own process memory
can end its call early with a value of its choosing, which it could do anyway (``return`` a
value, raise, a thread that prints later); it cannot change the captured output, the caps, the
exit status or signal, or another call's reply.
"""

import ast
import builtins
import ctypes
import io
import json
import os
import resource
import secrets
import select
import signal
import sys
import traceback

_READ = 1 << 16
_CONTINUATION = bytes(range(0x80, 0xC0))  # UTF-8 bytes that start no character
_MAX_COUNT = 1 << 53  # a claimed count is clipped here (a JSON number every reader keeps exact)
_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE, _PR_CAPBSET_DROP = 1, 4, 24
_CAP_KILL = 5
_CAP_VERSION_3 = 0x20080522
_MAX_NAME = 200


def _prctl(option, value):
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except InterruptedError:
            continue
        except OSError:  # the program closed or broke its own descriptor: its output is lost
            return


class _FdWriter(io.TextIOBase):
    """``sys.stdout``/``sys.stderr`` of one call: forwards the first ``cap + 1`` characters to ``fd``.

    Dropping the rest here only saves work (the supervisor caps what reaches the host); what was
    dropped is counted (``dropped``: characters, UTF-8 bytes) so the real size can be reported.
    """

    def __init__(self, fd, cap):
        super().__init__()
        self.fd, self.room, self.dropped = fd, cap + 1, [0, 0]

    def write(self, s):
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        part = s[: self.room] if self.room > 0 else ""
        if part:
            self.room -= len(part)
            _write_all(self.fd, part.encode("utf-8", "backslashreplace"))
        if len(part) < len(s):
            rest = s[len(part) :]
            self.dropped[0] += len(rest)
            self.dropped[1] += len(rest) if rest.isascii() else _utf8_size(rest)
        return len(s)

    def writable(self):
        return True

    @property
    def encoding(self):
        return "utf-8"


def _apply_limits(limits, uid):
    names = {
        "cpu": resource.RLIMIT_CPU,
        "as": resource.RLIMIT_AS,
        "nproc": resource.RLIMIT_NPROC,
        "fsize": resource.RLIMIT_FSIZE,
        "nofile": resource.RLIMIT_NOFILE,
    }
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for key, value in limits.items():
        if value is None:
            continue
        soft = int(value) + (1 if key == "nproc" and uid is None else 0)  # + the supervisor
        resource.setrlimit(names[key], (soft, soft + 1 if key == "cpu" else soft))


# ------------------------------------------------------------------------- privileges


def _prefer_for_oom(settings):
    """Raise ``oom_score_adj`` (no privilege needed), so the OOM killer takes the sandbox first."""
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write(str(int(settings["oom_score_adj"])))
    except (OSError, KeyError, TypeError):
        pass


def _drop_bounding_set():
    """Empty the capability bounding set (needs ``CAP_SETPCAP``; without it there is nothing to
    drop that this process could use: it has no capabilities)."""
    for cap in range(64):  # past the last capability the kernel knows, prctl fails: harmless
        _prctl(_PR_CAPBSET_DROP, cap)


def _keep_capabilities(mask):
    """Keep only the capabilities in ``mask`` (effective and permitted; none inheritable, which
    clears the ambient set too), with ``capset(2)``."""
    header = (ctypes.c_uint32 * 2)(_CAP_VERSION_3, 0)  # version, pid (0: this process)
    data = (ctypes.c_uint32 * 6)()  # {effective, permitted, inheritable} x 2 words
    for i in range(2):
        data[3 * i] = data[3 * i + 1] = (mask >> (32 * i)) & 0xFFFFFFFF
    if ctypes.CDLL(None, use_errno=True).capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")


def _capabilities():
    """``{"CapEff": int, "CapPrm": ..., "CapBnd": ..., "CapAmb": ..., "CapInh": ...}``."""
    with open("/proc/self/status") as f:
        rows = [line.split(":", 1) for line in f if line.startswith("Cap")]
    return {key: int(value, 16) for key, value in rows}


def _become_sandbox_user(settings):
    """Resource limits, then the given uid/gid (which drops every capability; checked), umask,
    working directory, and the parent death signal."""
    uid = settings.get("uid")
    _apply_limits(settings["limits"], uid)
    if uid is not None:
        _keep_capabilities(_capabilities()["CapPrm"])  # empties the inheritable (and ambient) set
        gid = settings.get("gid") or uid
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
        if any(_capabilities().values()):
            raise RuntimeError(f"capabilities left after dropping to uid {uid}: {_capabilities()}")
    if settings.get("umask") is not None:
        os.umask(settings["umask"])
    if settings.get("cwd"):
        os.chdir(settings["cwd"])
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # after setuid, which clears it


def _exec(settings):
    """Exec mode (an MCP server's launcher): limits, uid, then ``execv`` of ``settings["exec"]``
    (an absolute path and its arguments). Never returns; exits 126 when it cannot."""
    argv = settings["exec"]
    try:
        _prefer_for_oom(settings)
        _drop_bounding_set()
        _become_sandbox_user(settings)
        os.execv(argv[0], argv)
    except (OSError, RuntimeError, ValueError) as exc:
        os.write(2, f"agentic-rl sandbox: cannot start {argv[0]}: {exc}\n".encode())
        os._exit(126)


# --------------------------------------------------------------------------------- kernel


def _utf8_size(text):
    return len(text.encode("utf-8", "backslashreplace"))


def _run(code, namespace, cap):
    out, err = _FdWriter(1, cap), _FdWriter(2, cap)
    reply = {"value": None, "exception": None, "memory_exceeded": False, "exit": None}
    reply["dropped"] = dropped = [0, 0]
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
                if len(text) > cap:
                    dropped[0] += len(text) - cap
                    dropped[1] += _utf8_size(text[cap:])
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
        for stream in (sys.__stdout__, sys.__stderr__):  # what the program wrote through them
            try:
                stream.flush()
            except (OSError, ValueError, AttributeError):
                pass
    for writer in (out, err):
        dropped[0] += writer.dropped[0]
        dropped[1] += writer.dropped[1]
    return reply


def _kernel(settings, req_r, rep_w, out_w, err_w, keep_closed):
    """The forked child: limits, uid, descriptors, then the request loop. Never returns."""
    for fd in keep_closed:
        os.close(fd)
    _become_sandbox_user(settings)
    devnull = os.open(os.devnull, os.O_RDONLY)
    for src, dst in ((devnull, 0), (out_w, 1), (err_w, 2)):
        os.dup2(src, dst)
        os.close(src)
    cap = int(settings["max_output_chars"])
    requests, replies = os.fdopen(req_r, "rb"), os.fdopen(rep_w, "wb")
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    replies.write(b'{"token": "ready"}\n')
    replies.flush()
    while True:
        line = requests.readline()
        if not line:
            os._exit(0)
        request = json.loads(line)
        reply = _run(request["code"], namespace, cap)
        reply["token"] = request["token"]
        replies.write(json.dumps(reply).encode() + b"\n")
        replies.flush()
        if reply["exit"] is not None:
            os._exit(reply["exit"])


# ----------------------------------------------------------------------------- supervisor


class _Stream:
    """One capped output pipe of the kernel (descriptor 1 or 2), read by the supervisor."""

    def __init__(self, fd, cap):
        self.fd, self.limit, self.data, self.dropped, self.open = (
            fd,
            4 * cap + 4,
            bytearray(),
            0,
            True,
        )
        self.dropped_chars = 0
        os.set_blocking(fd, False)

    def read(self):
        """Read once; False at end of file or when nothing is there now."""
        try:
            chunk = os.read(self.fd, _READ)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            chunk = b""
        if not chunk:
            self.open = False
            return False
        room = max(0, self.limit - len(self.data))
        self.data += chunk[:room]
        if room < len(chunk):
            rest = chunk[room:]
            self.dropped += len(rest)
            self.dropped_chars += len(rest.translate(None, _CONTINUATION))  # UTF-8 characters
        return True

    def drain(self, budget=8 << 20):
        """Read what is in the pipe now (bounded, in case a background process keeps writing)."""
        while budget > 0 and self.open and self.read():
            budget -= _READ

    def take(self, cap):
        """(text, truncated, [characters, bytes] not kept) of what was read since the last take."""
        text = self.data.decode("utf-8", "replace")
        cut = bool(self.dropped) or len(text) > cap
        rest = text[cap:]
        dropped = [self.dropped_chars + len(rest), self.dropped + len(rest.encode("utf-8"))]
        self.data, self.dropped, self.dropped_chars = bytearray(), 0, 0
        return text[:cap], cut, dropped


class _Kernel:
    """The supervisor's handle on the kernel: pid, pipes, and the reply stream it reads."""

    def __init__(self, settings, keep_closed):
        cap = int(settings["max_output_chars"])
        (req_r, req_w), (rep_r, rep_w) = os.pipe(), os.pipe()
        (out_r, out_w), (err_r, err_w) = os.pipe(), os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                _kernel(
                    settings, req_r, rep_w, out_w, err_w, (*keep_closed, req_w, rep_r, out_r, err_r)
                )
            except BaseException:  # noqa: BLE001 - start-up failed: say why on the sandbox's stderr
                traceback.print_exc()
            finally:
                os._exit(70)
        for fd in (req_r, rep_w, out_w, err_w):
            os.close(fd)
        self.pid, self.cpu_limit, self.cap = pid, settings["limits"].get("cpu"), cap
        self.requests, self.replies, self.buffer = os.fdopen(req_w, "wb"), rep_r, b""
        self.out, self.err = _Stream(out_r, cap), _Stream(err_r, cap)
        try:
            self.pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            self.pidfd = None

    def _claim(self, token):
        """The last complete line of the reply pipe that carries ``token`` (dict), else None."""
        found = None
        while b"\n" in self.buffer:
            line, _, self.buffer = self.buffer.partition(b"\n")
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if isinstance(msg, dict) and msg.get("token") == token:
                found = msg
        if len(self.buffer) > 16 * self.cap + _READ:  # a "line" that never ends: junk
            self.buffer = b""
        return found

    def collect(self, token):
        """Wait for the kernel's reply carrying ``token`` or its death; (claim | None, wait status | None)."""
        claim, status, reply_open = None, None, True
        while status is None:
            fds = [s.fd for s in (self.out, self.err) if s.open] + (
                [self.replies] if reply_open else []
            )
            fds += [self.pidfd] if self.pidfd is not None else []
            ready = select.select(fds, [], [], None if self.pidfd is not None else 0.05)[0]
            for stream in (self.out, self.err):
                if stream.open and stream.fd in ready:
                    stream.read()
            if self.replies in ready:
                chunk = os.read(self.replies, _READ)
                reply_open = bool(chunk)
                self.buffer += chunk
                claim = self._claim(token) or claim
                if claim is not None and claim.get("exit") is None:
                    break
            if self.pidfd is None or self.pidfd in ready or not (reply_open or self.out.open):
                pid, wstatus, usage = os.wait4(self.pid, os.WNOHANG)
                if pid:
                    status, self.usage = wstatus, usage
        self.out.drain()
        self.err.drain()
        return claim, status

    def result(self, claim, status):
        """The reply sent to the host (see the module docstring)."""
        cap, claim = self.cap, claim or {}
        stdout, out_cut, out_dropped = self.out.take(cap)
        stderr, err_cut, err_dropped = self.err.take(cap)
        value = claim.get("value") if isinstance(claim.get("value"), str) else None
        value_cut = value is not None and len(value) > cap + len("…[truncated]")
        dropped = _claimed_counts(claim.get("dropped"))  # what the kernel cut before writing
        if value_cut:
            dropped = [dropped[0] + len(value) - cap, dropped[1] + _utf8_size(value[cap:])]
            value = value[:cap] + "…[truncated]"
        dropped = [dropped[i] + out_dropped[i] + err_dropped[i] for i in (0, 1)]
        exception = claim.get("exception") if isinstance(claim.get("exception"), str) else None
        exit_code = signum = None
        cpu = False
        if status is not None and os.WIFSIGNALED(status):
            signum = os.WTERMSIG(status)
            used = self.usage.ru_utime + self.usage.ru_stime
            # rusage lags the clock the limit is checked against by up to a few ticks
            cpu = (
                signum in (signal.SIGXCPU, signal.SIGKILL)
                and self.cpu_limit is not None
                and used >= self.cpu_limit - max(0.1, 0.02 * self.cpu_limit)
            )
        elif status is not None:
            exit_code = os.WEXITSTATUS(status)
        return {
            "stdout": stdout,
            "stderr": stderr,
            "value": value,
            "exception": exception[:_MAX_NAME] if exception else None,
            "memory_exceeded": claim.get("memory_exceeded") is True,
            "truncated": out_cut or err_cut or value_cut or dropped[0] > 0,
            "dropped": dropped,
            "exit": exit_code,
            "signal": signum,
            "cpu_exceeded": cpu,
        }


def _claimed_counts(claim):
    """The kernel's ``[characters, bytes]`` claim, each an int clipped to [0, 2**53]; [0, 0] if malformed."""
    if not (isinstance(claim, list) and len(claim) == 2):
        return [0, 0]
    return [min(max(v, 0), _MAX_COUNT) if type(v) is int else 0 for v in claim]


def main():
    settings = json.loads(sys.argv[1])
    if "exec" in settings:
        _exec(settings)
    proto_in, proto_out = settings["protocol_fds"]
    _prctl(_PR_SET_DUMPABLE, 0)
    _prefer_for_oom(settings)
    _drop_bounding_set()
    kernel = _Kernel(settings, (proto_in, proto_out))
    if settings.get("uid") is not None:  # the supervisor keeps only what kills the kernel
        _keep_capabilities(1 << _CAP_KILL)
    claim, status = kernel.collect("ready")
    if claim is None:
        sys.stderr.write(kernel.result(None, status)["stderr"])
        sys.exit(1)
    host_in, host_out = os.fdopen(proto_in, "rb"), os.fdopen(proto_out, "wb")
    host_out.write(b'{"ready": true}\n')
    host_out.flush()
    while True:
        line = host_in.readline()
        if not line:
            os.kill(kernel.pid, signal.SIGKILL)
            return
        token = secrets.token_hex(16)
        try:
            kernel.requests.write(
                json.dumps({"code": json.loads(line)["code"], "token": token}).encode() + b"\n"
            )
            kernel.requests.flush()
        except BrokenPipeError:  # the kernel is gone (or closed its end): collect sees how
            pass
        reply = kernel.result(*kernel.collect(token))
        host_out.write(json.dumps(reply).encode() + b"\n")
        host_out.flush()
        if reply["exit"] is not None or reply["signal"] is not None:
            return


if __name__ == "__main__":
    main()

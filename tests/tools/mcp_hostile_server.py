"""A real MCP server (fastmcp, stdio) that misbehaves on request, for the MCP sandbox tests.

Tools:

- ``status()``: JSON of what the server runs as: uid, capability sets (``/proc/self/status``),
  ``oom_score_adj``, rlimits, working directory, cgroup lines;
- ``hold_memory(mib)``: allocate and touch ``mib`` MiB, keep it, answer ``"held"``;
- ``hold_in_children(children, mib)``: fork ``children`` processes that each touch ``mib`` MiB
  and sleep; once each has touched its memory or died, answer how many are still alive;
- ``spawn(n)``: fork up to ``n`` sleeping children; answer how many forks succeeded;
- ``fill(mib)``: write 4 MiB files into the working directory up to ``mib`` MiB; answer JSON
  ``{"written", "errno"}``;
- ``spam_stderr(mib)``: write ``mib`` MiB to descriptor 2; answer ``"done"``;
- ``sleep(seconds)``: sleep (a busy server).
"""

from __future__ import annotations

import json
import os
import resource
import time

from fastmcp import FastMCP

mcp = FastMCP("agentic-rl-hostile-server")
_HELD: list[bytearray] = []


@mcp.tool
def status() -> str:
    """What this server runs as."""
    with open("/proc/self/status") as f:
        rows = dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
    with open("/proc/self/oom_score_adj") as f:
        oom = int(f.read())
    with open("/proc/self/cgroup") as f:
        cgroup = f.read().splitlines()
    limits = {
        name: resource.getrlimit(getattr(resource, f"RLIMIT_{name.upper()}"))[0]
        for name in ("as", "nproc", "fsize", "nofile", "cpu")
    }
    caps = {k: rows[k] for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}
    return json.dumps(
        {
            "uid": os.getuid(),
            "gid": os.getgid(),
            "groups": os.getgroups(),
            "caps": caps,
            "no_new_privs": rows.get("NoNewPrivs"),
            "oom_score_adj": oom,
            "limits": limits,
            "cwd": os.getcwd(),
            "cgroup": cgroup,
        }
    )


def _touch(mib: int) -> bytearray:
    block = bytearray(mib << 20)
    for i in range(0, len(block), 4096):
        block[i] = 1
    return block


@mcp.tool
def hold_memory(mib: int) -> str:
    """Allocate and keep mib MiB."""
    _HELD.append(_touch(mib))
    return "held"


@mcp.tool
def hold_in_children(children: int, mib: int) -> str:
    """Fork children that each hold mib MiB; say how many live once each has either touched
    its memory (it writes a byte to a pipe) or died (at most 60 s)."""
    read_end, write_end = os.pipe()
    pids = []
    for _ in range(children):
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            held = _touch(mib)  # kept: a discarded block is freed at once (no pressure)
            os.write(write_end, b"t")
            time.sleep(60)
            del held
            os._exit(0)
        pids.append(pid)
    os.close(write_end)
    os.set_blocking(read_end, False)
    touched, dead, deadline = 0, set(), time.monotonic() + 60
    while touched + len(dead) < children and time.monotonic() < deadline:
        time.sleep(0.05)
        try:
            touched += len(os.read(read_end, children))
        except BlockingIOError:
            pass
        dead |= {pid for pid in pids if pid not in dead and os.waitpid(pid, os.WNOHANG) != (0, 0)}
    os.close(read_end)
    alive = children - len(dead)
    return str(alive)


@mcp.tool
def spawn(n: int) -> str:
    """Fork up to n sleeping children; say how many forks succeeded."""
    done = 0
    for _ in range(n):
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        done += 1
    return str(done)


@mcp.tool
def fill(mib: int) -> str:
    """Write 4 MiB files into the working directory, up to mib MiB."""
    written, err, chunk = 0, None, b"x" * (1 << 20)
    try:
        for i in range(0, mib, 4):
            with open(f"fill-{i}", "wb") as f:
                for _ in range(4):
                    f.write(chunk)
                    f.flush()
                    written += len(chunk)
    except OSError as exc:
        err = exc.errno
    return json.dumps({"written": written, "errno": err})


@mcp.tool
def spam_stderr(mib: int) -> str:
    """Write mib MiB to descriptor 2."""
    line = (b"e" * 1023) + b"\n"
    for _ in range(mib << 10):
        os.write(2, line)
    return "done"


@mcp.tool
def sleep(seconds: float) -> str:
    """Sleep for a number of seconds."""
    time.sleep(seconds)
    return f"slept {seconds} s"


if __name__ == "__main__":
    mcp.run(show_banner=False)

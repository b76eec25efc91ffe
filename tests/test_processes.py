"""The child-server watchdog (agentic_rl.processes): real servers, a real owner killed with SIGKILL.

Each test runs an owner process (tests/killed_owner.py) that starts a server with a grandchild
that leaves the server's process group (as bwrap's sandbox or Chromium's crash handler do), kills
the owner, and checks that the server, the grandchild and the port are gone within seconds.
"""

from __future__ import annotations

import os
import signal

from tests.killed_owner import env_marked, pid_alive, port_open, run_and_kill, wait_until

#: a server: an HTTP server on a free port, plus a grandchild in a session of its own
SERVER = (
    "import http.server, os, sys, time\n"
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    time.sleep(600)\n"
    "    os._exit(0)\n"
    "srv = http.server.HTTPServer(('127.0.0.1', 0), http.server.SimpleHTTPRequestHandler)\n"
    "print(srv.server_address[1], flush=True)\n"
    "srv.serve_forever()\n"
)

OWNER = f"""
import subprocess, sys
from agentic_rl.processes import spawn_guarded, guard
proc, registration = spawn_guarded([sys.executable, "-c", {SERVER!r}], stdout=subprocess.PIPE,
                                   text=True)
port = int(proc.stdout.readline())
marker = [e for e in open(f"/proc/{{proc.pid}}/environ").read().split("\\0")
          if e.startswith("AGENTIC_RL_CHILD=")][0]
state = {{"pid": proc.pid, "port": port, "marker": marker, "watchdog": guard().watchdog_pid()}}
"""


def _all_gone(state: dict) -> bool:
    return not env_marked(state["marker"]) and not port_open(state["port"])


def test_a_killed_owner_leaves_no_server_grandchild_or_port():
    state = run_and_kill(OWNER)
    assert wait_until(lambda: _all_gone(state), 10.0), env_marked(state["marker"])
    assert wait_until(lambda: not pid_alive(state["watchdog"]), 5.0)  # it exits when done


def test_a_forked_child_of_the_owner_does_not_keep_the_watchdog_waiting():
    # the fork holds no write end of the watchdog's pipe (os.register_at_fork closes it)
    code = OWNER + (
        "import os, time\n"
        "fork = os.fork()\n"
        "if fork == 0:\n"
        "    time.sleep(600)\n"
        "    os._exit(0)\n"
        "state['fork'] = fork\n"
    )
    state = run_and_kill(code)
    try:
        assert pid_alive(state["fork"])
        assert wait_until(lambda: _all_gone(state), 10.0), env_marked(state["marker"])
    finally:
        os.kill(state["fork"], signal.SIGKILL)


def test_a_dead_watchdog_is_restarted_with_every_live_registration():
    code = OWNER + (
        "import os, signal, time\n"
        "os.kill(guard().watchdog_pid(), signal.SIGKILL)\n"
        "time.sleep(0.5)\n"
        "later = guard().register(rmtree='/nonexistent-agentic-rl-test')\n"  # restarts it
        "state['watchdog'] = guard().watchdog_pid()\n"
    )
    state = run_and_kill(code)
    assert wait_until(lambda: _all_gone(state), 10.0), env_marked(state["marker"])


def test_a_released_registration_is_forgotten():
    # the owner stopped the server itself (here: released it without stopping, to see it)
    state = run_and_kill(OWNER + "registration.release()\nregistration.release()\n")
    try:
        assert not wait_until(lambda: not pid_alive(state["pid"]), 2.0)  # still there
        assert wait_until(lambda: not pid_alive(state["watchdog"]), 5.0)
    finally:
        for pid in env_marked(state["marker"]):
            os.kill(pid, signal.SIGKILL)

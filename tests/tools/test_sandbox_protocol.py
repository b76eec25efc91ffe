"""The worker's reply protocol cannot be forged by the sandboxed program (issue 19, item 6).

The program prints reply-shaped JSON on its stdout and stderr, writes forged replies (host and
kernel formats) to every descriptor number it has and to the descriptors of the sandbox's other
processes, and reads the call's token from its own memory to forge an early reply. None of it
changes the captured output, the caps, the flags, or the next call's reply.
"""

from __future__ import annotations

import json
import shutil

import pytest

from agentic_rl.tools.sandbox.bwrap import SandboxConfig, bwrap_available
from agentic_rl.tools.sandbox.episode import EpisodeSandbox
from tests.markers import BWRAP_SKIP_REASON

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None or not bwrap_available(),
    reason=BWRAP_SKIP_REASON,
)

CAP = 1000
FORGED = {
    "stdout": "FORGED",
    "stderr": "",
    "value": "'forged'",
    "exception": None,
    "memory_exceeded": True,
    "truncated": True,
    "exit": 7,
    "signal": 11,
    "cpu_exceeded": True,
    "token": "ready",
    "ready": True,
}
# writes the forged line (host and kernel shapes; the kernel one with guessed tokens) to every
# descriptor number, to the descriptors of every other process it can open, and prints it
ATTACK = f"""
import json, os, sys
line = (json.dumps({FORGED!r}) + "\\n").encode()
big = (json.dumps(dict({FORGED!r}, stdout="Y" * {10 * CAP})) + "\\n").encode()
for fd in range(3, 1024):
    for data in (line, big, b'{{"token": "0"}}\\n'):
        try:
            os.write(fd, data)
        except OSError:
            pass
for pid in os.listdir("/proc"):
    if pid.isdigit() and int(pid) != os.getpid():
        for fd in range(0, 64):
            try:
                with open(f"/proc/{{pid}}/fd/{{fd}}", "wb", buffering=0) as f:
                    f.write(line)
            except OSError:
                pass
print(line.decode(), end="")
sys.stdout.flush()
os.write(1, line)
os.write(2, line)
sys.__stdout__.write(line.decode())
sys.__stdout__.flush()
"done"
"""


@pytest.fixture
def box():
    with EpisodeSandbox(SandboxConfig(timeout_s=10.0, max_output_chars=CAP)) as sandbox:
        yield sandbox


def test_forged_replies_change_neither_output_flags_nor_the_next_reply(box):
    box.run_python("x = 41")
    r = box.run_python(ATTACK)
    line = json.dumps(FORGED) + "\n"
    assert r.stdout == line * 3  # print, os.write(1), sys.__stdout__: plain output, in order
    assert r.stderr == line
    assert r.value == "'done'"
    assert (r.exit_status, r.signal, r.memory_exceeded, r.output_truncated, r.cpu_exceeded) == (
        None,
        None,
        False,
        False,
        False,
    )
    assert (r.timed_out, r.exception, r.status) == (False, None, "ok")
    for i in range(3):  # later calls get their own replies, in the same interpreter
        assert box.run_python(f"x + {i}").value == str(41 + i)


def test_output_written_around_the_worker_is_still_capped(box):
    r = box.run_python(
        f"import os\nos.write(1, b'x' * {20 * CAP})\nos.write(2, b'e' * {20 * CAP})\n"
        f"print('p' * {20 * CAP})"
    )
    assert r.output_truncated
    assert r.stdout == "x" * CAP and r.stderr == "e" * CAP


def test_a_reply_forged_with_the_stolen_token_cannot_fake_an_exit_or_shift_the_next_reply(box):
    # the program reads this call's token from the worker's frame (it shares the process) and
    # claims an exit; the claim is not believed (the process lives on) and the next reply is right
    steal = (
        "import sys, os, json\nf = sys._getframe()\n"
        "while 'request' not in f.f_locals:\n    f = f.f_back\n"
        "token = f.f_locals['request']['token']\nfd = f.f_locals['replies'].fileno()\n"
        "os.write(fd, (json.dumps({'token': token, 'value': None, 'exception': None, "
        "'memory_exceeded': False, 'exit': 5}) + '\\n').encode())\n"
        "print('after')\n'real'"
    )
    r = box.run_python(steal)
    assert (r.exit_status, r.signal, r.value, r.stdout) == (None, None, "'real'", "after\n")
    # an early reply with a value of its choosing ends the call early (as returning would);
    # the real reply that follows is dropped, not taken as the next call's
    early = steal.replace("'exit': 5", "'exit': None").replace(
        "'value': None", "'value': \"'early'\""
    )
    r = box.run_python(early + "\nimport time\ntime.sleep(0.3)\nprint('late')")
    assert r.value == "'early'" and r.exit_status is None
    r = box.run_python("y = 6\ny * 7")
    assert r.value == "42" and "late" in r.stdout  # late output is output, not a reply

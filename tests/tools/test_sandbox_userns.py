"""No user namespaces inside the bwrap sandbox (issue 19, item 4): the seccomp filter of
:mod:`agentic_rl.tools.sandbox.seccomp` refuses them, and ordinary processes and threads still start."""

from __future__ import annotations

import shutil
import struct

import pytest

from agentic_rl.tools.sandbox.bwrap import SandboxConfig, bwrap_available
from agentic_rl.tools.sandbox.episode import EpisodeSandbox
from agentic_rl.tools.sandbox.seccomp import user_namespace_filter
from tests.markers import BWRAP_SKIP_REASON

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None or not bwrap_available(),
    reason=BWRAP_SKIP_REASON,
)


def test_filter_program_shape():
    program = user_namespace_filter("x86_64")
    assert program is not None and len(program) % 8 == 0 and len(program) // 8 == 14
    code, jt, jf, k = struct.unpack("=HBBI", program[-8:])
    assert (code, k) == (0x06, 0x7FFF0000)  # the last instruction allows
    assert user_namespace_filter("aarch64") is not None and user_namespace_filter("sparc") is None


@needs_bwrap
def test_a_user_namespace_cannot_be_created_inside_the_sandbox():
    code = (
        "import ctypes, errno, os, subprocess, threading\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "rc = libc.unshare(0x10000000)\n"  # CLONE_NEWUSER
        "err = errno.errorcode.get(ctypes.get_errno())\n"
        "nr = {'x86_64': 56, 'aarch64': 220}[os.uname().machine]\n"  # clone(CLONE_NEWUSER | SIGCHLD)
        "pid = libc.syscall(nr, 0x10000000 | 17, 0, 0, 0, 0)\n"
        "if pid == 0:\n    os._exit(0)\n"
        "cli = errno.errorcode.get(ctypes.get_errno()) if pid < 0 else os.waitpid(pid, 0) and 'made'\n"
        "t = threading.Thread(target=lambda: None); t.start(); t.join()\n"
        "child = subprocess.run(['/bin/sh', '-c', 'echo forked'], capture_output=True, text=True).stdout\n"
        "(rc, err, cli, child)"
    )
    with EpisodeSandbox(SandboxConfig(timeout_s=20.0)) as box:
        result = box.run_python(code)
    assert result.value == "(-1, 'EPERM', 'EPERM', 'forked\\n')", result

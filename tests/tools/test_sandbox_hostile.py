"""Hostile programs run in the bwrap sandbox: each must be contained (issue 4, "Done when" 1).

Each test starts its own episode. Limits are lowered (short timeouts, few processes) so the
whole file runs in well under a minute on a 2-core machine.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time

import pytest

from agentic_rl.tools.sandbox.bwrap import SandboxConfig, bwrap_available
from agentic_rl.tools.sandbox.episode import EpisodeSandbox, find_processes
from tests.markers import BWRAP_SKIP_REASON

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None or not bwrap_available(),
    reason=BWRAP_SKIP_REASON,
)


@pytest.fixture
def box():
    sandbox = EpisodeSandbox(SandboxConfig(timeout_s=2.0, max_processes=32))
    yield sandbox
    sandbox.close()
    assert find_processes(sandbox.marker) == []


def _host_peak_rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def test_infinite_loop_times_out_within_limit(box):
    r = box.run_python("while True:\n    pass")
    assert r.timed_out and not r.ok
    assert r.duration_s < box.config.timeout_s + 1.0
    assert "timed out" in r.render()
    assert box.run_python("1 + 1").value == "2"  # restarted transparently


def test_fork_bomb_is_contained_and_leaves_no_process(box):
    r = box.run_python(
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    )
    assert r.timed_out
    assert box.run_python("1").value == "1"
    box.close()
    assert find_processes(box.marker) == []


def test_process_limit_refuses_forks(box):
    code = (
        "import os, time\nn = 0\nfor _ in range(1000):\n    try:\n        pid = os.fork()\n"
        "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(60)\n"
        "        os._exit(0)\n    n += 1\nn"
    )
    r = box.run_python(code)
    assert r.value is not None and int(r.value) < box.config.max_processes


def test_allocating_8_gib_reports_memory_exceeded(box):
    before = _host_peak_rss_bytes()
    r = box.run_python("b = bytearray(8 << 30)")
    assert r.memory_exceeded and r.exception == "MemoryError"
    assert "memory limit exceeded" in r.render()
    assert _host_peak_rss_bytes() - before < 50 << 20
    assert box.run_python("2 * 3").value == "6"  # the interpreter survives


def test_printing_200_mb_is_truncated_and_host_memory_bounded(box):
    before = _host_peak_rss_bytes()
    r = box.run_python("chunk = 'x' * 1_000_000\nfor _ in range(200):\n    print(chunk)")
    assert r.output_truncated
    assert len(r.stdout) <= box.config.max_output_chars
    # 200 lines of 1,000,001 characters: all but the first 20,000 were cut, and counted
    assert "[output truncated: 199980200 more characters not shown]" in r.render()
    assert _host_peak_rss_bytes() - before < 50 << 20


def test_host_file_outside_workspace_is_not_visible(box, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-42")
    r = box.run_python(f"open({str(secret)!r}).read()")
    assert r.exception == "FileNotFoundError"
    assert "TOP-SECRET-42" not in r.stdout + r.stderr + str(r.value)
    r = box.run_python("import os\nsorted(os.listdir('/'))")
    assert "home" not in r.value and "var" not in r.value


def test_writing_outside_workspace_fails(box, tmp_path):
    target = tmp_path / "escaped.txt"
    for path in (str(target), "/usr/escaped.txt", "/escaped.txt"):
        r = box.run_python(f"open({path!r}, 'w').write('x')")
        assert r.exception in ("FileNotFoundError", "PermissionError", "OSError"), r
    assert not target.exists() and not os.path.exists("/usr/escaped.txt")
    assert box.run_python("open('/tmp/ok.txt', 'w').write('x')").value == "1"  # private /tmp


def test_tcp_connection_to_host_server_fails(box):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.5)
    port = server.getsockname()[1]
    accepted = []

    def accept():
        try:
            accepted.append(server.accept())
        except OSError:
            pass

    thread = threading.Thread(target=accept)
    thread.start()
    r = box.run_python(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)")
    server.close()
    thread.join()
    assert r.exception in ("ConnectionRefusedError", "OSError", "TimeoutError"), r
    assert accepted == []


def test_host_environment_secret_is_not_visible(monkeypatch):
    monkeypatch.setenv("AGENTIC_RL_TEST_SECRET", "hunter2-secret")
    with EpisodeSandbox(SandboxConfig(timeout_s=2.0)) as b:
        r = b.run_python("import os\ndict(os.environ)")
    assert "hunter2-secret" not in r.value
    assert "AGENTIC_RL_TEST_SECRET" not in r.value
    assert "'HOME': '/workspace'" in r.value


def test_killing_the_parent_leaves_the_host_unaffected(box):
    r = box.run_python("import os\nos.kill(os.getppid(), 9)")
    assert r.exception in (None, "PermissionError")
    os.kill(os.getpid(), 0)  # we are still alive
    assert box.run_python("40 + 2").value == "42"


def test_double_forked_daemon_is_gone_after_close(box):
    code = (
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        "        time.sleep(3600)\n    os._exit(0)\nos.wait()\n'spawned'"
    )
    assert box.run_python(code).value == "'spawned'"
    time.sleep(0.1)
    assert len(find_processes(box.marker)) >= 3  # bwrap, the interpreter, the daemon
    box.close()
    assert find_processes(box.marker) == []


def test_sys_exit_0_is_a_normal_observation(box):
    box.run_python("x = 1")
    r = box.run_python("import sys\nprint('bye')\nsys.exit(0)")
    assert r.exit_status == 0 and not r.timed_out and r.stdout == "bye\n"
    assert "exited with status 0" in r.render()
    assert box.run_python("'x' in globals()").value == "False"  # fresh interpreter


def test_os_exit_3_is_a_normal_observation(box):
    r = box.run_python("import os\nos._exit(3)")
    assert r.exit_status == 3 and not r.timed_out and not r.ok
    assert box.run_python("7").value == "7"

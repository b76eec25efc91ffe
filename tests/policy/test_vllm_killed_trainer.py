"""A real vLLM server group (api server + engine core) does not outlive a SIGKILLed trainer.

The trainer (tests/killed_owner.py) starts :class:`~agentic_rl.policy.vllm_server.VLLMServer`
and is killed once vLLM has forked its engine-core process, before the server is ready (the
readiness wait would add a minute and proves nothing more here): no ``stop()`` and no finalizer
runs, so only the child-server watchdog can stop the group. Skips without ``.venv-vllm``.
"""

from __future__ import annotations

from agentic_rl.policy.vllm_server import group_members
from tests.killed_owner import run_and_kill, wait_until
from tests.policy.vllm_fixtures import skip_without_vllm

pytestmark = skip_without_vllm

OWNER = """
import time
from agentic_rl.policy.vllm_server import VLLMServer, group_members
server = VLLMServer({model_dir!r}, log_path={log!r}, eager=True).start()
pgid = server.proc.pid
deadline = time.monotonic() + 600
while len(group_members(pgid)) < 2 and time.monotonic() < deadline:
    time.sleep(0.5)
state = {{"pgid": pgid, "members": group_members(pgid)}}
"""


def test_a_killed_trainer_leaves_no_vllm_process(model_dir, tmp_path):
    code = OWNER.format(model_dir=str(model_dir), log=str(tmp_path / "server.log"))
    state = run_and_kill(code, timeout_s=900)
    assert len(state["members"]) >= 2, (tmp_path / "server.log").read_text()[-2000:]
    assert wait_until(lambda: not group_members(state["pgid"]), 20.0), group_members(state["pgid"])

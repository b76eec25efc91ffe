"""The private local Ray that env and generation workers run on listens on loopback only, with
token authentication (issue 39 item 16: it opened 6 of its 7 sockets on every interface)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentic_rl.config import load_config
from agentic_rl.trainer.parallel.scale_out import scale_out
from tests.net_helpers import descendants, is_loopback, listening

ray = pytest.importorskip("ray", reason="the optional extra 'ray' is not installed")


def test_private_ray_of_the_trainer_listens_on_loopback_only_with_token_auth():
    if ray.is_initialized():  # a previous module's cluster: this test needs its own start
        ray.shutdown()
    switch = os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")
    me = os.getpid()
    before = {(ip, port) for ip, port, _ in listening({me})}
    config = load_config(None, ["scale.num_env_workers=2", "scale.env_worker_cpus=0.5"])
    with scale_out(config) as scaled:  # as the trainer starts it
        env = scaled.make_env("calculator-v0")
        env.reset(seed=0)  # the workers are up and serving
        sockets = [
            (ip, port, pid)
            for ip, port, pid in listening(descendants(me))
            if pid != me or (ip, port) not in before
        ]
        node_ip = ray.util.get_node_ip_address()
        auth_mode = os.environ.get("RAY_AUTH_MODE")
        env.close()
    assert not ray.is_initialized()
    # GCS, raylet (node manager, object manager), the driver's and each worker's core worker
    assert len(sockets) >= 5, sockets
    exposed = [s for s in sockets if not is_loopback(s[0])]
    assert exposed == [], f"listening beyond loopback: {exposed}"
    assert node_ip == "127.0.0.1"
    assert auth_mode == "token"
    token = Path.home() / ".ray" / "auth_token"  # Ray's default token source, none other set
    if not (os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")):
        assert token.stat().st_mode & 0o777 == 0o600
    # the loopback switch is undone: a later join of a real cluster sees Ray's own setting
    assert os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER") == switch

"""The browser never runs as root (issue 39 item 18: a POST to chromedriver's unauthenticated
loopback port from an unprivileged local user started a binary of that user's choosing as root)
and Chromium's DevTools listen on no port. Real chromedriver + Chromium (Debian's packages);
the privilege tests need a root host (what the red team attacked) and skip otherwise."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from agentic_rl.tools.browser.identity import (
    UID_RANGE,
    BrowserIdentity,
    browser_identity,
    readable_by_browser,
)
from agentic_rl.tools.browser.launch import Browser, BrowserUnavailableError
from tests.net_helpers import is_loopback, listening

NOBODY = 65534
ROOT_ONLY = pytest.mark.skipif(
    os.geteuid() != 0, reason="the browser drops privileges only as root"
)


@pytest.fixture
def browser():
    pytest.importorskip("selenium", reason="the 'web' extra is not installed: pip install '.[web]'")
    b = Browser()
    try:
        b.start().get("data:text/html,<p>up</p>")
    except BrowserUnavailableError as exc:
        b.close()
        pytest.skip(str(exc))
    yield b
    b.close()


def _status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


def test_chromium_devtools_listen_on_no_port(browser):
    sockets = listening(set(browser.pids()))
    names = {pid: Path(f"/proc/{pid}/comm").read_text().strip() for _, _, pid in sockets}
    assert sockets, "chromedriver's own port should be listed"
    assert {names[pid] for _, _, pid in sockets} == {"chromedriver"}, sockets  # none of Chromium
    assert all(is_loopback(ip) for ip, _, _ in sockets), sockets


@ROOT_ONLY
def test_every_browser_process_runs_as_its_own_uid_without_capabilities(browser):
    pids = browser.pids()
    assert len(pids) >= 3  # chromedriver, chromium and its helpers
    uids = set()
    for pid in pids:
        status = _status(pid)
        real, effective, saved, fs = map(int, status["Uid"].split())
        assert real == effective == saved == fs and real in UID_RANGE, (pid, status["Uid"])
        assert {int(g) for g in status["Gid"].split()} == {real} and status["Groups"].strip() == ""
        for caps in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
            assert int(status[caps], 16) == 0, (pid, caps, status[caps])
        assert status["NoNewPrivs"].strip() == "1"
        uids.add(real)
    assert len(uids) == 1
    assert os.stat(browser.profile).st_uid in uids
    other = Browser()
    try:
        other.start()
        assert {int(_status(p)["Uid"].split()[0]) for p in other.pids()}.isdisjoint(uids)
    finally:
        other.close()


@ROOT_ONLY
def test_a_local_user_posting_to_chromedriver_runs_nothing_as_root(browser):
    port = browser.driver.service.port
    drop = tempfile.mkdtemp(prefix="agentic-rl-attack-")
    try:
        os.chmod(drop, 0o777)
        payload = Path(drop, "payload.sh")
        payload.write_text(
            f"#!/bin/sh\nid -u > {drop}/uid.tmp\ngrep -E '^Cap' /proc/self/status > {drop}/caps\n"
            f"mv {drop}/uid.tmp {drop}/uid\n"
        )
        payload.chmod(0o755)
        body = json.dumps(
            {"capabilities": {"alwaysMatch": {"goog:chromeOptions": {"binary": str(payload)}}}}
        )
        request = (
            f"POST /session HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}"
        )
        attacker = [
            *["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"],
            *["bash", "-c", f'exec 3<>/dev/tcp/127.0.0.1/{port}; printf %s "$1" >&3', "-", request],
        ]
        assert shutil.which("setpriv")
        assert subprocess.run(attacker, timeout=30).returncode == 0  # the port is reachable
        deadline = time.monotonic() + 30
        while not Path(drop, "uid").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        uid = int(Path(drop, "uid").read_text())  # chromedriver did start the payload …
        caps = dict(line.split(":\t") for line in Path(drop, "caps").read_text().splitlines())
        assert uid != 0 and uid in UID_RANGE  # … but as the browser's throwaway uid
        assert all(int(value, 16) == 0 for value in caps.values()), caps
    finally:
        shutil.rmtree(drop, ignore_errors=True)


def test_the_identity_drops_everything_through_setpriv():
    assert BrowserIdentity().argv("/usr/bin/chromedriver") == ["/usr/bin/chromedriver"]
    argv = BrowserIdentity(300_001, "/usr/bin/setpriv").argv("/usr/bin/chromedriver")
    assert argv[0] == "/usr/bin/setpriv" and argv[-2:] == ["--", "/usr/bin/chromedriver"]
    for flag in ("--reuid=300001", "--regid=300001", "--clear-groups", "--no-new-privs"):
        assert flag in argv
    for caps in ("--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all"):
        assert caps in argv
    if os.geteuid() == 0 and shutil.which("setpriv"):
        assert browser_identity().uid in UID_RANGE
    elif os.geteuid() != 0:
        assert browser_identity() == BrowserIdentity()


@ROOT_ONLY
def test_what_a_root_owners_browser_can_read(tmp_path):
    assert not readable_by_browser(tmp_path)  # pytest's folder of root is 0700
    shared = Path(tempfile.mkdtemp(prefix="agentic-rl-shared-"))
    try:
        shared.chmod(0o755)
        page = shared / "p.html"
        page.write_text("<p>x</p>")
        page.chmod(0o644)
        assert readable_by_browser(shared) and readable_by_browser(page)
        page.chmod(0o600)
        assert not readable_by_browser(page)
        assert not readable_by_browser(shared / "missing.html")
    finally:
        shutil.rmtree(shared, ignore_errors=True)


@ROOT_ONLY
def test_miniwob_pages_come_over_loopback_http_when_the_package_folder_is_private(monkeypatch):
    pytest.importorskip("miniwob", reason="the 'web' extra is not installed: pip install '.[web]'")
    from agentic_rl.envs import make
    from agentic_rl.envs.checker import play_oracle
    from agentic_rl.envs.web import _miniwob_driver

    # as if the virtualenv lay under /root: the browser's uid could not read file:// pages
    monkeypatch.setattr(_miniwob_driver, "readable_by_browser", lambda path: False)
    env = make("miniwob/click-button-v0")
    try:
        trajectory = play_oracle(env, 0, max_turns=4)
        assert trajectory.turns[-1].info["success"] == 1.0
        assert env._driver().current_url.startswith("http://127.0.0.1:")
    finally:
        env.close()

"""Who the browser runs as: never root, never with a capability.

``chromedriver`` serves its WebDriver API on a loopback port with no authentication (it has no
option for any), and a ``POST /session`` names the binary it starts (``goog:chromeOptions``
``binary``). Run as root, any local user who reaches that port runs a program of their choice
as root. So when the owner is root, :func:`browser_identity` gives every browser a **uid of its
own** (drawn from :data:`UID_RANGE`, as the python sandbox draws per-episode uids from another
range; the gid is the same number, no supplementary groups), and :meth:`BrowserIdentity.argv`
starts ``chromedriver`` (and with it Chromium, which inherits everything) through util-linux's
``setpriv``: that uid and gid, empty inheritable, ambient and bounding capability sets, and
``no_new_privs`` (a set-uid or file-capability binary gains nothing). The profile folder is
handed to that uid (:meth:`BrowserIdentity.prepare`), ``HOME`` points into it. So the browser
reads only what any user may read: a ``file://`` page under a private folder (``/root``, a
0700 temporary folder) does not load; :func:`readable_by_browser` tells, and MiniWoB's pages
are served over loopback HTTP when their folder is private
(:mod:`agentic_rl.envs.web._miniwob_driver`).

Chromium's DevTools listen on no port at all: it talks to chromedriver over a pipe
(``--remote-debugging-pipe`` in :data:`~agentic_rl.tools.browser.launch.CHROMIUM_FLAGS`).

What stays open, on purpose (docs/web_envs.md, "Security"): chromedriver's own port, on
loopback. Another local user can still connect to it and drive the browser or start a program,
but only as the browser's throwaway uid, with no capability and no write access to anything of
the owner's. Not root owners cannot switch uid: their browser runs as themselves, as before, so
a shared multi-user host should train as root (or in a container of its own). Keeping the port
away from other users entirely would need a network namespace of its own, which the pages the
browser must reach (the shop, MiniWoB, on the owner's loopback) rule out without a relay.

Layer rule: the standard library only.
"""

from __future__ import annotations

import functools
import os
import secrets
import shutil
import stat
import subprocess
from dataclasses import dataclass

__all__ = ["UID_RANGE", "BrowserIdentity", "browser_identity", "readable_by_browser"]

#: uids handed to browsers of a root owner (the python sandbox uses 200000-299999)
UID_RANGE = range(300_000, 400_000)


@dataclass(frozen=True)
class BrowserIdentity:
    """The uid a browser runs as (None: the owner's own, when the owner is not root).

    Attributes:
        uid: the browser's uid and gid, or None.
        setpriv: path of ``setpriv`` (when ``uid`` is set).
    """

    uid: int | None = None
    setpriv: str = ""

    def argv(self, program: str) -> list[str]:
        """The command that runs ``program`` as this identity (``[program]`` for the owner's)."""
        if self.uid is None:
            return [program]
        return [
            self.setpriv,
            f"--reuid={self.uid}",
            f"--regid={self.uid}",
            "--clear-groups",
            "--inh-caps=-all",
            "--ambient-caps=-all",
            "--bounding-set=-all",
            "--no-new-privs",
            "--",
            program,
        ]

    def prepare(self, profile: str, env: dict[str, str]) -> dict[str, str]:
        """Give ``profile`` (the browser's fresh, empty folder) to the uid; return ``env`` with
        ``HOME`` in it (the owner's home is not the browser's to write)."""
        if self.uid is None:
            return env
        os.chown(profile, self.uid, self.uid)
        return {**env, "HOME": profile}


def readable_by_browser(path: str | os.PathLike[str]) -> bool:
    """Whether a browser of :func:`browser_identity` can read ``path`` (a file, or a folder's
    files): always when this process is not root (the browser is the owner), else when every
    folder above it lets others through (``o+x``) and ``path`` lets others read (``o+r``; a
    folder also ``o+x``). Never raises (a path that cannot be examined is unreadable)."""
    if os.geteuid() != 0:
        return True
    try:
        target = os.path.realpath(path)
        mode = os.stat(target).st_mode
        folder = os.path.dirname(target)
        while True:
            if not os.stat(folder).st_mode & stat.S_IXOTH:
                return False
            parent = os.path.dirname(folder)
            if parent == folder:
                break
            folder = parent
    except OSError:
        return False
    wanted = stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(mode) else 0)
    return mode & wanted == wanted


@functools.lru_cache(maxsize=1)
def _setpriv_problem() -> str | None:
    """Why ``setpriv`` cannot drop to an unprivileged uid here, or None. Probed once."""
    exe = shutil.which("setpriv")
    if exe is None:
        return "setpriv is not installed (Debian's util-linux)"
    probe = BrowserIdentity(UID_RANGE[0], exe).argv("/bin/true")
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"setpriv failed to run: {exc}"
    if done.returncode != 0:
        return f"setpriv cannot drop privileges here: {done.stderr.strip()}"
    return None


def browser_identity() -> BrowserIdentity:
    """A fresh identity for one browser: its own unprivileged uid when this process is root,
    else the owner's (module docstring).

    Raises:
        PermissionError: root, but ``setpriv`` is missing or cannot drop privileges here (the
            browser is not started as root instead).
    """
    if os.geteuid() != 0:
        return BrowserIdentity()
    problem = _setpriv_problem()
    if problem is not None:
        raise PermissionError(
            f"refusing to run the browser as root: {problem}; install util-linux's setpriv or "
            "run as a non-root user"
        )
    return BrowserIdentity(
        UID_RANGE[0] + secrets.randbelow(len(UID_RANGE)), shutil.which("setpriv") or ""
    )

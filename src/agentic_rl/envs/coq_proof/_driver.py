"""The coqtop driver that runs *inside* the sandbox (stdlib only; its source is sent to the
sandboxed interpreter as code, never imported by the host).

``_Coq(argv, timeout_s, findlib_conf)`` starts ``coqtop -emacs`` with stdout and stderr on one pipe and reads
to its first prompt. ``run(sentences, timeout_s)`` sends the sentences one at a time and reads
each one's reply up to the next ``<prompt>...</prompt>`` (coqtop's ``-emacs`` mode prints one
after every sentence it reads). The prompt's state number advances when a sentence is accepted
and stays when it fails, which is how failures are told apart from output that merely mentions
an error. ``run`` stops at the first failure and returns ``[(status, state_number, text), ...]``,
status one of ``ok``, ``error``, ``timeout`` (no prompt within ``timeout_s``: coqtop is killed),
``dead`` (coqtop exited) or ``desync`` (more prompts came than sentences were sent: coqtop
parsed a sentence as two; coqtop is killed so the host replays into a fresh one).
"""

import os
import re
import select
import subprocess
import time

_PROMPT = re.compile(rb"<prompt>[^\n]*? < (\d+) \|[^\n]*?</prompt>")
_MAX_REPLY = 20000


def _coq_env(findlib_conf):
    """The environment Coq runs with: this one plus ``OCAMLFIND_CONF`` naming a copy of the
    host's findlib configuration in the sandbox's private /tmp (the sandbox does not mount
    the host's /etc, and coqtop finds its plugins through findlib)."""
    path = "/tmp/ocamlfind.conf"
    with open(path, "w") as f:
        f.write(findlib_conf)
    return {**os.environ, "OCAMLFIND_CONF": path}


class _Coq:
    def __init__(self, argv, timeout_s, findlib_conf):
        self.proc = subprocess.Popen(
            argv,
            env=_coq_env(findlib_conf),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            bufsize=0,
        )
        self.buf = b""
        status, self.state, text = self._reply(timeout_s)
        if status != "ok":
            raise RuntimeError(f"coqtop did not start ({status}): {text[-500:]}")

    def _reply(self, timeout_s):
        """Read up to the next prompt: (status, state number or -1, text before the prompt)."""
        deadline = time.monotonic() + timeout_s
        fd = self.proc.stdout.fileno()
        while True:
            match = _PROMPT.search(self.buf)
            if match:
                text = self.buf[: match.start()]
                self.buf = self.buf[match.end() :]
                return "ok", int(match.group(1)), _cap(text.decode("utf-8", "replace"))
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                return "timeout", -1, _cap(self.buf.decode("utf-8", "replace"))
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                self.kill()
                return "dead", -1, _cap(self.buf.decode("utf-8", "replace"))
            self.buf += chunk
            if len(self.buf) > 4 * _MAX_REPLY and not _PROMPT.search(self.buf):
                self.buf = self.buf[:_MAX_REPLY] + b"\n[...]\n" + self.buf[-_MAX_REPLY:]

    def run(self, sentences, timeout_s):
        out = []
        for sentence in sentences:
            try:
                self.proc.stdin.write(sentence.encode() + b"\n")
            except OSError:
                self.kill()
                out.append(("dead", -1, ""))
                return out
            status, state, text = self._reply(timeout_s)
            if status == "ok" and state == self.state:
                status = "error"
            if status == "ok":
                self.state = state
            out.append((status, state, text))
            if status != "ok":
                break
        if self.proc.poll() is None and self._extra_prompt():
            self.kill()
            out.append(("desync", -1, ""))
        return out

    def _extra_prompt(self):
        """True when coqtop printed another prompt after the last one read (it split a
        sentence in two); waits 10 ms for one."""
        ready, _, _ = select.select([self.proc.stdout.fileno()], [], [], 0.01)
        if ready:
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            self.buf += chunk
        return b"<prompt>" in self.buf

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def _cap(text):
    return text if len(text) <= _MAX_REPLY else text[:_MAX_REPLY] + "\n[output cut]"

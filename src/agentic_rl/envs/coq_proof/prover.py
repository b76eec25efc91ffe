"""Coq inside the sandbox: an interactive proof session (``coqtop``) and the final check (``coqc``).

:class:`ProofSession` holds one episode's proof: ``coqtop -emacs`` runs in the episode's
bubblewrap sandbox (:class:`~agentic_rl.tools.sandbox.episode.EpisodeSandbox`: no network, the
host's ``/usr`` read-only, a private workspace, an unprivileged uid, memory/CPU/process limits),
driven by a small stdlib driver (:mod:`agentic_rl.envs.coq_proof._driver`) that the sandboxed
interpreter runs. The host sends one sentence at a time and reads the reply up to coqtop's next
prompt; the proof state after an accepted tactic is coqtop's own goal display (hypotheses,
``====``, conclusion; further goals by their conclusion), with the ``(ID n)`` tags removed.

Time and memory. Every tactic is sent as ``Timeout t <tactic>``, so a long tactic fails with
Coq's ``Error: Timeout!`` and the session goes on. Behind it the driver gives up on a sentence
after ``t + 2`` s and kills coqtop, and the sandbox kills everything after ``t + 5`` s; coqtop
runs under the sandbox's address-space and CPU limits, so a tactic that eats memory kills
coqtop, not the host. When coqtop is gone (killed, out of memory, or a sentence it parsed as
two), the next sentence first replays the accepted ones into a fresh coqtop: the session's
state is the list of accepted sentences, which is also what a snapshot holds.

The final check (:func:`check_proof`) never trusts the session: it writes a fresh file with
exactly the prelude, the definitions, ``Lemma name : statement.``, ``Proof.``, the accepted
tactics and ``Qed.``, then ``Redirect "assumptions" Print Assumptions name.``, compiles it with
``coqc`` in a *new* sandbox, and passes only if ``coqc`` exits 0 and the redirected file
(written by Coq, which the agent's tactics cannot do: they hold no strings) says
``Closed under the global context``.
"""

from __future__ import annotations

import ast
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from agentic_rl.envs.coq_proof.lemmas import PRELUDE, Lemma
from agentic_rl.envs.coq_proof.sentences import split_sentences
from agentic_rl.tools.sandbox import workspace as ws
from agentic_rl.tools.sandbox.bwrap import SandboxConfig
from agentic_rl.tools.sandbox.episode import EpisodeSandbox

__all__ = ["CheckResult", "ProofSession", "Step", "check_proof", "coq_problem", "proof_file"]

_DRIVER = Path(__file__).with_name("_driver.py").read_text()
_COQTOP = ["coqtop", "-q", "-emacs"]
_NOISE = re.compile(r"^(Toplevel input, characters.*|> .*|>)$")
_TAGS = re.compile(r"</?(infomsg|warning|prompt)>")
_ID = re.compile(r" \(ID \d+\)")
CLOSED = "Closed under the global context"
_DEFAULT_FINDLIB = 'path="/usr/lib/ocaml"\n'


def findlib_conf() -> str:
    """The host's ``/etc/ocamlfind.conf`` (Debian's findlib configuration, which coqtop needs
    to find its plugins), or a default naming ``/usr/lib/ocaml``. Never raises."""
    try:
        return Path("/etc/ocamlfind.conf").read_text()[:10_000]
    except OSError:
        return _DEFAULT_FINDLIB


def coq_problem() -> str | None:
    """Why Coq cannot run here (``coqtop``/``coqc`` missing), or None. Never raises."""
    missing = [p for p in ("coqtop", "coqc") if shutil.which(p) is None]
    if missing:
        return f"{' and '.join(missing)} not found; install Coq with: apt-get install coq"
    return None


def clean(text: str) -> str:
    """coqtop's reply without the echo of the input, tags and ``(ID n)``. Never raises."""
    lines = [_ID.sub("", _TAGS.sub("", line)).rstrip() for line in text.splitlines()]
    kept = [line for line in lines if not _NOISE.match(line)]
    return "\n".join(kept).strip()


@dataclass(frozen=True)
class Step:
    """What one sentence did.

    Attributes:
        sentence: the sentence as the agent wrote it (without the ``Timeout`` prefix).
        status: ``ok``, ``error`` (Coq refused it; the state is unchanged), ``timeout`` (the
            driver or the sandbox stopped it; coqtop restarts on the next sentence) or
            ``crash`` (coqtop died, ran out of memory or lost sync while running it; it
            restarts on the next sentence).
        text: coqtop's cleaned reply (the new goals, a query's answer, or the error).
    """

    sentence: str
    status: str
    text: str


class ProofSession:
    """One lemma's interactive proof in coqtop inside a sandbox (see the module docstring).

    Args:
        lemma: the task.
        config: the sandbox's backend and limits (its ``timeout_s`` bounds one sentence).
        tactic_timeout_s: Coq's ``Timeout`` for each tactic, whole seconds (>= 1).

    Attributes:
        accepted: the sentences coqtop accepted so far, in order (the proof so far).
        goals: the proof state after the last accepted tactic (the statement's goal at first).

    Raises:
        SandboxUnavailableError, SandboxError: from the first :meth:`run` (not here).
    """

    def __init__(self, lemma: Lemma, config: SandboxConfig, tactic_timeout_s: int = 5):
        self.lemma, self.config, self.tactic_timeout_s = lemma, config, int(tactic_timeout_s)
        self.accepted: list[str] = []
        self.goals = f"1 goal\n\n  ============================\n  {lemma.statement}"
        self.box: EpisodeSandbox | None = None

    def _call(self, code: str) -> list[tuple[str, int, str]] | str:
        """Run driver code; its list of replies, or a string saying how the call ended."""
        assert self.box is not None
        result = self.box.run_python(code)
        if result.value is None:
            why = "timeout" if result.timed_out else "crash"
            self.close()
            return why
        return ast.literal_eval(result.value)

    def _start(self) -> str | None:
        """Start coqtop, load the header, replay :attr:`accepted`; None, or why it failed."""
        self.box = EpisodeSandbox(self.config)
        header = split_sentences(PRELUDE) + split_sentences(self.lemma.context)
        header.append(self.lemma.declaration)
        limit = self.tactic_timeout_s + 2
        code = (
            f"{_DRIVER}\n__coq = _Coq({_COQTOP!r}, {limit}, {findlib_conf()!r})\n"
            f"__coq.run({header!r}, {limit})"
        )
        replies = self._call(code)
        if isinstance(replies, str) or any(r[0] != "ok" for r in replies):
            self.close()
            return f"coqtop could not load the lemma: {replies!r}"[:500]
        for sentence in self.accepted:
            replies = self._call(f"__coq.run([{self._wrap(sentence)!r}], {limit})")
            if isinstance(replies, str) or replies[-1][0] != "ok":
                self.close()
                return f"replaying {sentence!r} failed: {replies!r}"[:500]
        return None

    def _wrap(self, sentence: str) -> str:
        """``Timeout t sentence`` for a tactic; bullets, braces (``2: {`` too) and queries as
        they are."""
        if sentence.endswith(("{", "}")) or sentence[0] in "-+*" or sentence[0].isupper():
            return sentence
        return f"Timeout {self.tactic_timeout_s} {sentence}"

    def run(self, sentence: str, record: bool = True) -> Step:
        """Send one sentence (a tactic or a query, see :mod:`.sentences`) and read its reply.

        Args:
            sentence: one sentence from :func:`~.sentences.split_sentences`.
            record: keep it in :attr:`accepted` and :attr:`goals` when it succeeds (False for
                queries, which are not part of the proof).

        Raises:
            SandboxUnavailableError, SandboxError: the sandbox cannot start.
            RuntimeError: coqtop cannot load the lemma (a broken install or catalogue).
        """
        if self.box is None:
            problem = self._start()
            if problem:
                raise RuntimeError(problem)
        limit = self.tactic_timeout_s + 2
        replies = self._call(f"__coq.run([{self._wrap(sentence)!r}], {limit})")
        if isinstance(replies, str):
            return Step(sentence, replies, "")
        status, _, text = replies[0]
        if len(replies) > 1 or status in ("dead", "desync"):
            self.close()  # coqtop is gone or out of step: the next sentence replays
            return Step(sentence, "crash", clean(text))
        if status == "timeout":
            self.close()
            return Step(sentence, "timeout", clean(text))
        if status == "error" and "Error: Out of memory" in text:
            self.close()  # coqtop's heap stays grown and later tactics fail: start afresh
            return Step(sentence, "crash", clean(text))
        step = Step(sentence, status, clean(text))
        if status == "ok" and record:
            self.accepted.append(sentence)
            self.goals = step.text or self.goals
        return step

    def close(self) -> None:
        """Stop coqtop and remove the sandbox (a later :meth:`run` starts anew). Idempotent."""
        if self.box is not None:
            self.box.close()
            self.box = None


@dataclass(frozen=True)
class CheckResult:
    """The fresh-file check of a proof.

    Attributes:
        passed: ``coqc`` accepted the file and the lemma is closed under the global context.
        detail: ``coqc``'s output tail, or the assumptions it printed, when it did not pass.
    """

    passed: bool
    detail: str


def proof_file(lemma: Lemma, tactics: list[str]) -> str:
    """The file :func:`check_proof` compiles: prelude, definitions, the original statement,
    ``Proof.``, ``tactics``, ``Qed.`` and the redirected ``Print Assumptions``. Never raises."""
    body = "\n".join(tactics)
    return (
        f"{PRELUDE}\n{lemma.context}\n{lemma.declaration}\nProof.\n{body}\nQed.\n"
        f'Redirect "assumptions" Print Assumptions {lemma.name}.\n'
    )


def check_proof(
    lemma: Lemma, tactics: list[str], config: SandboxConfig, timeout_s: float = 30.0
) -> CheckResult:
    """Compile :func:`proof_file` with ``coqc`` in a new sandbox (module docstring).

    Raises:
        SandboxUnavailableError, SandboxError: the sandbox cannot start.
    """
    with EpisodeSandbox(config) as box:
        ws.write_file(box.workspace, "Attempt.v", proof_file(lemma, tactics), max_bytes=1 << 20)
        code = (
            f"{_DRIVER}\n"
            "import subprocess as __sp, pathlib as __pl\n"
            "try:\n"
            "    __r = __sp.run(['coqc', '-q', 'Attempt.v'], capture_output=True, text=True,\n"
            f"                   env=_coq_env({findlib_conf()!r}), timeout={timeout_s})\n"
            "    __out = (__r.returncode, (__r.stdout + __r.stderr)[-1500:])\n"
            "except __sp.TimeoutExpired:\n"
            f"    __out = (None, 'coqc ran longer than {timeout_s} s')\n"
            "__p = __pl.Path('assumptions.out')\n"
            "(*__out, __p.read_text()[:2000] if __p.is_file() else '')\n"
        )
        result = box.run_python(code)
    if result.value is None:
        return CheckResult(False, f"the check did not finish: {result.stderr[-500:]}")
    status, output, assumptions = ast.literal_eval(result.value)
    if status != 0:
        return CheckResult(False, clean(output))
    if assumptions.strip() != CLOSED:
        return CheckResult(False, assumptions.strip() or "Print Assumptions printed nothing")
    return CheckResult(True, "")

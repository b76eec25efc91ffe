"""Splitting the agent's Coq text into sentences, and deciding which sentences it may send.

The agent only ever writes *tactics* inside a proof whose statement the env fixed. Its text is
split the way Coq's lexer ends sentences (:func:`split_sentences`): at a ``.`` followed by white
space or the end, outside comments ``(* ... *)`` (nested) and strings; bullets (``-``, ``+``,
``*``, repeated) and braces ``{`` ``}`` at the start of a sentence are sentences of their own,
as ``coqtop`` reads them, and so is a goal selector followed by a brace (``2: {``).
Comments are dropped.

Each sentence is then classified (:func:`classify`):

=============  ===========================================================================
kind           sentences
=============  ===========================================================================
``tactic``     starts with a lowercase letter, ``_`` or ``(``, optionally after a goal
               selector (``all:``, ``2:``, ``1-3:``, ``[x]:``, ``!:``, ``par:``); bullets and
               braces
``query``      ``Check``, ``Search``, ``About``, ``Locate``, ``Print``, ``Show`` (read-only:
               run and shown, never part of the proof)
``qed``        ``Qed.``: ends the proof (graded by a fresh ``coqc`` run)
``cheat``      what would prove the lemma without proving it or change what is proved:
               ``Admitted``, ``Abort``, the ``admit``/``give_up`` tactics anywhere in the
               sentence, new assumptions (``Axiom``, ``Parameter``, ``Hypothesis``,
               ``Variable``, ``Context``, ``Conjecture``...), new statements (``Lemma``,
               ``Theorem``, ``Goal``, ``Definition``...), loading or configuring Coq
               (``Require``, ``Import``, ``From``, ``Set``, ``Unset``, ``Declare``, ``Load``,
               ``Redirect``, ``Drop``, attributes ``#[...]``, ``Local``/``Global``...)
``refused``    anything else: other vernacular commands (``Undo``, ``Restart``, ``Defined``,
               ``Time``, ``Fail``...), string literals (tactics need none; a string could
               forge coqtop's prompt), over-long sentences
=============  ===========================================================================

Cheats are refused *and* reported (the env turns each into a ``proof_cheat`` risk event);
refused sentences are only refused. Nothing here is the last line of defence: the final proof
is re-checked by ``coqc`` on a fresh file that holds exactly the original statement and the
accepted tactics, followed by ``Print Assumptions`` (see :mod:`agentic_rl.envs.coq_proof.prover`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Sentence", "SplitError", "classify", "split_sentences", "MAX_SENTENCE_CHARS"]

#: longest sentence accepted (characters, comments removed)
MAX_SENTENCE_CHARS = 2000

_QUERIES = {"Check", "Search", "SearchPattern", "SearchRewrite", "About", "Locate", "Print", "Show"}
_CHEAT_COMMANDS = {
    # closing a proof without proving it, or dropping it
    "Admitted",
    "Abort",
    # new assumptions
    "Axiom",
    "Axioms",
    "Parameter",
    "Parameters",
    "Conjecture",
    "Conjectures",
    "Hypothesis",
    "Hypotheses",
    "Variable",
    "Variables",
    "Context",
    # new or changed statements
    "Lemma",
    "Theorem",
    "Goal",
    "Definition",
    "Fixpoint",
    "CoFixpoint",
    "Example",
    "Fact",
    "Remark",
    "Corollary",
    "Proposition",
    "Property",
    "Instance",
    "Program",
    "Let",
    "Inductive",
    "Notation",
    "Infix",
    # loading or configuring the system
    "Require",
    "Import",
    "Export",
    "From",
    "Set",
    "Unset",
    "Declare",
    "Load",
    "Redirect",
    "Drop",
    "Local",
    "Global",
    "Register",
    "Extract",
    "Extraction",
    "Typeclasses",
    "Hint",
    "Ltac",
    "Tactic",
    "Opaque",
    "Transparent",
    "Strategy",
    "Arguments",
    "Module",
    "Section",
    "End",
}
_CHEAT_TACTIC = re.compile(r"(?<![\w'.])(admit|give_up)(?![\w'])")
_SELECTOR = re.compile(
    r"^(all|par|!|\d+(\s*-\s*\d+)?(\s*,\s*\d+(\s*-\s*\d+)?)*|\[\s*\w+\s*\])\s*:\s*"
)
_BULLET = re.compile(r"^(-+|\++|\*+)(?=\s|$|[^-+*])")


class SplitError(ValueError):
    """The text does not split into sentences (an unclosed comment); the message says why."""


@dataclass(frozen=True)
class Sentence:
    """One classified sentence.

    Attributes:
        text: the sentence as sent to Coq, comments removed, ending with ``.`` (bullets and
            braces end without one).
        kind: ``tactic``, ``query``, ``qed``, ``cheat`` or ``refused`` (module docstring).
        reason: why a ``cheat`` or ``refused`` sentence was turned down ("" otherwise).
    """

    text: str
    kind: str
    reason: str = ""


def _strip_comments(text: str) -> str:
    """``text`` with every (nested) ``(* ... *)`` replaced by a space; strings are kept whole.

    Raises:
        SplitError: a comment is not closed.
    """
    out, i, depth, in_string = [], 0, 0, False
    while i < len(text):
        two = text[i : i + 2]
        if depth == 0 and text[i] == '"':
            in_string = not in_string
            out.append(text[i])
            i += 1
        elif not in_string and two == "(*":
            depth += 1
            i += 2
        elif depth and two == "*)":
            depth -= 1
            i += 2
            if depth == 0:
                out.append(" ")
        else:
            if depth == 0:
                out.append(text[i])
            i += 1
    if depth:
        raise SplitError("a comment '(*' is not closed with '*)'")
    return "".join(out)


def split_sentences(text: str) -> list[str]:
    """Split Coq text into sentences as ``coqtop`` reads them (module docstring).

    A last fragment without its final ``.`` gets one (a small model's reply often stops there).

    Raises:
        SplitError: a comment is not closed.
    """
    text = _strip_comments(text)
    sentences, i, start, in_string = [], 0, 0, False
    while i < len(text):
        if text[start:i].strip() == "":
            match = _BULLET.match(text[i:])
            if text[i] in "{}":
                sentences.append(text[i])
                i = start = i + 1
                continue
            if match:
                sentences.append(match.group(1))
                i = start = i + match.end()
                continue
            if text[i].isspace():
                i += 1
                continue
        ch = text[i]
        if ch == '"':
            in_string = not in_string
        elif ch == "{" and not in_string and _SELECTOR.fullmatch(text[start:i].strip() + " "):
            sentences.append(" ".join(text[start : i + 1].split()))  # "2: {" is a sentence
            start = i + 1
        elif (
            ch == "."
            and not in_string
            and (i + 1 == len(text) or text[i + 1].isspace())
            and text[start:i].strip() not in ("",)
        ):
            sentences.append(" ".join(text[start : i + 1].split()))
            start = i + 1
        i += 1
    rest = " ".join(text[start:].split())
    if rest:
        sentences.append(rest if rest.endswith(".") else rest + ".")
    return sentences


def classify(sentence: str) -> Sentence:
    """Classify one sentence from :func:`split_sentences` (kinds in the module docstring).

    Never raises.
    """
    if sentence in ("{", "}") or _BULLET.fullmatch(sentence):
        return Sentence(sentence, "tactic")
    if len(sentence) > MAX_SENTENCE_CHARS:
        return Sentence(sentence, "refused", f"longer than {MAX_SENTENCE_CHARS} characters")
    body = sentence[:-1].strip() if sentence.endswith(".") else sentence
    head = re.split(r"[\s.(:]", body, maxsplit=1)[0]
    if _CHEAT_TACTIC.search(body):
        return Sentence(sentence, "cheat", "admit and give_up leave the goal unproved")
    if body.startswith("#["):
        return Sentence(sentence, "cheat", "attributes change how Coq checks commands")
    if head in _CHEAT_COMMANDS:
        return Sentence(sentence, "cheat", f"{head} is not a tactic; the statement is fixed")
    if '"' in body:
        return Sentence(sentence, "refused", "string literals are not allowed")
    if head == "Qed" and body == "Qed":
        return Sentence(sentence, "qed")
    if head in _QUERIES:
        return Sentence(sentence, "query")
    rest = _SELECTOR.sub("", body, count=1)
    if rest == "{":
        return Sentence(sentence, "tactic")
    if rest[:1].islower() or rest[:1] in ("_", "("):
        return Sentence(sentence, "tactic")
    return Sentence(
        sentence, "refused", f"{head or sentence!r} is not a tactic (only tactics and Qed)"
    )

"""coq-proof-v0: sentence splitting and refusals, the lemma catalogue and its reference proofs
(checked by coqc), turn-by-turn proof states, cheats refused with risk, the fresh-file check,
and Coq's time and memory limits inside the sandbox."""

from __future__ import annotations

import json
import subprocess
from collections import Counter

import pytest

from agentic_rl.envs import make
from agentic_rl.envs.coq_proof.lemmas import DEFINITIONS, LEVELS, PRELUDE, lemmas
from agentic_rl.envs.coq_proof.prover import check_proof
from agentic_rl.envs.coq_proof.sentences import classify, split_sentences
from agentic_rl.envs.oracle_success import play_oracle
from agentic_rl.types import Action, ToolCall, Trajectory
from tests.markers import needs_bwrap, needs_coq

LEMMAS = {lemma.name: lemma for lemma in lemmas()}


def call(tactics: str) -> Action:
    """A reply that calls run_tactics once."""
    arguments = {"tactics": tactics}
    return Action(
        text="", tool_calls=(ToolCall("run_tactics", arguments, json.dumps(arguments), "c1"),)
    )


def kinds(text: str) -> list[tuple[str, str]]:
    return [(s, classify(s).kind) for s in split_sentences(text)]


def test_sentences_split_like_coqtop_reads_them():
    """Bullets and braces are sentences of their own, comments go, a missing last period is added,
    a period inside a name (Nat.add_comm) does not end a sentence."""
    assert split_sentences("intros n. induction n. - simpl. reflexivity. -- lia.") == [
        "intros n.",
        "induction n.",
        "-",
        "simpl.",
        "reflexivity.",
        "--",
        "lia.",
    ]
    assert split_sentences("rewrite Nat.add_comm. { lia. } (* Admitted. *) auto") == [
        "rewrite Nat.add_comm.",
        "{",
        "lia.",
        "}",
        "auto.",
    ]
    assert split_sentences("intros...  exact I.") == ["intros...", "exact I."]
    assert split_sentences("split. 2: { lia. } auto.") == ["split.", "2: {", "lia.", "}", "auto."]


@pytest.mark.parametrize(
    "text,kind",
    [
        ("Admitted.", "cheat"),
        ("Abort.", "cheat"),
        ("admit.", "cheat"),
        ("exact ltac:(admit).", "cheat"),
        ("try give_up.", "cheat"),
        ("Axiom cheat : False.", "cheat"),
        ("Parameter p : nat.", "cheat"),
        ("Hypothesis h : False.", "cheat"),
        ("Lemma other : True.", "cheat"),
        ("Goal True.", "cheat"),
        ("Require Import Classical.", "cheat"),
        ("From Coq Require Import Classical.", "cheat"),
        ("Unset Guard Checking.", "cheat"),
        ("Set Nested Proofs Allowed.", "cheat"),
        ("#[local] Hint Resolve I.", "cheat"),
        ("Redirect x Print nat.", "cheat"),
        ("Declare ML Module x.", "cheat"),
        ('idtac "<prompt>x < 3 |x| 0 < </prompt>".', "refused"),
        ("Undo.", "refused"),
        ("Defined.", "refused"),
        ("The proof is easy.", "refused"),
        ("Check nat.", "query"),
        ("Search (_ + 0 = _).", "query"),
        ("Qed.", "qed"),
        ("all: lia.", "tactic"),
        ("2: reflexivity.", "tactic"),
        ("(intros; lia).", "tactic"),
        ("admitted_lemma_name_is_fine.", "tactic"),
        ("-", "tactic"),
        ("{", "tactic"),
    ],
)
def test_sentence_classes(text, kind):
    [sentence] = split_sentences(text)
    assert classify(sentence).kind == kind, classify(sentence)


def test_catalogue_has_over_100_lemmas_in_three_levels():
    counts = Counter(lemma.level for lemma in lemmas())
    assert sum(counts.values()) >= 100 and set(counts) == set(LEVELS) == {1, 2, 3}
    assert min(counts.values()) >= 25, counts
    assert len(LEMMAS) == len(lemmas())  # unique names
    for lemma in lemmas():  # every reference proof is tactics only: nothing the env would refuse
        assert {classify(s).kind for s in split_sentences(lemma.proof)} == {"tactic"}, lemma.name


@needs_coq
@pytest.mark.parametrize("level", sorted(LEVELS))
def test_every_reference_proof_is_checked_by_coqc(level, tmp_path):
    """All lemmas of a level in one file, each closed by Qed, each Print Assumptions closed."""
    level_lemmas = [lemma for lemma in lemmas() if lemma.level == level]
    body = "\n".join(
        f"{lemma.declaration}\nProof.\n{lemma.proof}\nQed.\n"
        f'Redirect "{lemma.name}" Print Assumptions {lemma.name}.'
        for lemma in level_lemmas
    )
    (tmp_path / "Levels.v").write_text(f"{PRELUDE}\n{DEFINITIONS if level == 3 else ''}\n{body}\n")
    done = subprocess.run(
        ["coqc", "-q", "Levels.v"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for lemma in level_lemmas:
        assert (tmp_path / f"{lemma.name}.out").read_text().strip() == (
            "Closed under the global context"
        ), lemma.name


@pytest.fixture
def env():
    env = make("coq-proof-v0", tactic_timeout_s=2)
    yield env
    env.close()


def _index(env, name: str) -> int:
    return env.lemmas.index(LEMMAS[name])


def _reset_to(env, name: str):
    return env.reset(seed=_index(env, name))


def _tool_call(tactics: str) -> str:
    return f"<tool_call>{json.dumps({'name': 'run_tactics', 'arguments': {'tactics': tactics}})}</tool_call>"


def play(env, name: str, replies: list[str]) -> Trajectory:
    """One episode of lemma ``name`` with scripted replies, through the checker's episode loop
    (the env's own parser path, no tokenizer)."""
    env.oracle_reply = iter(replies).__next__
    return play_oracle(env, _index(env, name), max_turns=len(replies))


@needs_coq
@needs_bwrap
def test_turn_by_turn_states_errors_and_qed(env):
    """The agent sees the goals after each accepted tactic, an error with the unchanged state,
    a refusal of an early Qed; the checked Qed ends the episode with outcome 1."""
    obs, info = _reset_to(env, "app_nil")
    assert info == {"lemma": "app_nil", "level": 2}
    assert "Lemma app_nil : forall (A : Type) (l : list A), l ++ [] = l." in obs.messages[1].content
    obs, reward, term, trunc, info = env.step(call("intros A l. induction l as [|x l IH]."))
    text = obs.messages[0].content
    assert "2 goals" in text and "A : Type" in text and "(x :: l) ++ [] = x :: l" in text
    assert (reward, term, trunc) == (0, False, False)
    assert (info["tactics_sent"], info["tactics_accepted"]) == (2, 2)
    obs, *_, info = env.step(call("- reflexivity. - simpl. rewrite l. Qed."))
    text = obs.messages[0].content
    assert "Error in `rewrite l.`" in text and "IH : l ++ [] = l" in text  # state unchanged
    assert (info["tactics_sent"], info["tactics_accepted"]) == (5, 4)  # bullets count as tactics
    obs, *_ = env.step(call("Check app_nil_r. Qed."))
    assert (
        "app_nil_r" in obs.messages[0].content
        and "the proof is not complete" in obs.messages[0].content
    )
    obs, reward, term, trunc, info = env.step(call("rewrite IH. reflexivity. Qed."))
    assert (reward, term, trunc, info["correct"]) == (1.0, True, False, True)
    assert info["proof"].endswith("- simpl. rewrite IH. reflexivity.")  # no query in the proof


@needs_coq
@needs_bwrap
@pytest.mark.parametrize(
    "cheat",
    [
        "Admitted.",
        "admit.",
        "Axiom ax : forall n : nat, n + 0 = n.",
        "Abort.",
        "Lemma arith_0 : True.",
        "Require Import Coq.Logic.Classical.",
        "Unset Guard Checking.",
    ],
)
def test_cheats_are_refused_and_cost_risk(env, cheat):
    """A cheat is never sent to Coq: refused with one proof_cheat risk event; the Qed after it
    is not reached, a later Qed is refused (the goal is open), and nothing is proved."""
    trajectory = play(
        env, "arith_0", [_tool_call(f"{cheat} Qed."), _tool_call("Qed."), "I give up."]
    )
    first = trajectory.turns[0]
    assert "Refused" in first.observation.messages[0].content
    assert [e.category for e in first.risk_events] == ["proof_cheat"]
    assert "the proof is not complete" in trajectory.turns[1].observation.messages[0].content
    assert trajectory.terminated and trajectory.turns[-1].info["correct"] is False
    total, components = env.rubric().score(trajectory)
    assert components["proof_checked"] == 0.0 and components["proof_cheats"] == 1.0
    assert total < 0  # the cheat costs more than the process credit pays


@needs_coq
@needs_bwrap
def test_the_fresh_file_check_catches_what_slips_past_the_session(env):
    """The final check trusts nothing the session did: an axiom declared inside the proof (which
    coqtop accepts in proof mode) or a given-up goal fails it; the reference proof passes."""
    lemma = LEMMAS["arith_0"]
    axiom = ["Axiom ax : forall n : nat, n + 0 = n.", "exact ax."]
    result = check_proof(lemma, axiom, env.config)
    assert not result.passed and "ax : forall n : nat, n + 0 = n" in result.detail
    result = check_proof(lemma, ["intros n.", "admit."], env.config)
    assert not result.passed and "given up goals" in result.detail
    assert check_proof(lemma, split_sentences(lemma.proof), env.config).passed


@needs_coq
@needs_bwrap
def test_a_long_tactic_times_out_and_the_proof_goes_on(env):
    """Coq's Timeout stops a looping tactic after tactic_timeout_s (2 s here); the session
    keeps its state and the proof completes."""
    trajectory = play(
        env, "arith_0", [_tool_call("intros n. do 1000000000 idtac."), _tool_call("lia. Qed.")]
    )
    text = trajectory.turns[0].observation.messages[0].content
    assert "Error in `do 1000000000 idtac.`: Timeout!" in text and "n : nat" in text
    assert trajectory.turns[-1].info["correct"] is True


@needs_coq
@needs_bwrap
def test_out_of_memory_restarts_coq_and_replays_the_proof(env):
    """A tactic that exhausts the sandbox's address-space limit (1 GiB) is a sandbox limit hit;
    a fresh coqtop replays the accepted tactics and the proof completes."""
    blowup = "assert (H : length (repeat 0 (Nat.pow 10 8)) = 0) by (vm_compute; reflexivity)."
    trajectory = play(env, "arith_0", [_tool_call(f"intros n. {blowup}"), _tool_call("lia. Qed.")])
    first = trajectory.turns[0]
    assert "crashed Coq" in first.observation.messages[0].content
    assert [e.category for e in first.risk_events] == ["sandbox_limit"]
    assert trajectory.turns[-1].info["correct"] is True
    assert trajectory.turns[-1].info["proof"] == "intros n. lia."


@needs_coq
@needs_bwrap
def test_strings_are_refused_without_risk_and_no_tool_call_gives_up(env):
    trajectory = play(env, "taut_0", [_tool_call('idtac "x".'), "The lemma is obvious."])
    first = trajectory.turns[0]
    assert "string literals are not allowed" in first.observation.messages[0].content
    assert first.risk_events == () and first.info["tactics_sent"] == 0
    assert trajectory.terminated and trajectory.turns[-1].info["correct"] is False


@needs_coq
@needs_bwrap
def test_a_snapshot_mid_proof_restores_into_a_fresh_env(env):
    """After a snapshot the replayed coqtop gives the same state and the proof finishes."""
    _reset_to(env, "length_app")
    obs, *_ = env.step(call("intros A l1 l2. induction l1 as [|x l1 IH]."))
    snapshot = env.snapshot()
    fresh = make("coq-proof-v0", tactic_timeout_s=2)
    try:
        fresh.restore(snapshot)
        obs2, *_ = fresh.step(call("all: simpl."))
        obs1, *_ = env.step(call("all: simpl."))
        assert obs1.messages[0].content == obs2.messages[0].content
        *_, info = fresh.step(call("- reflexivity. - rewrite IH. reflexivity. Qed."))
        assert info["correct"] is True
    finally:
        fresh.close()

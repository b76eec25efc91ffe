"""The lemmas of ``coq-proof-v0``: statements in three levels, each with a reference proof.

Written for this env (statements only go to the agent; the reference proofs are the oracle's
and are checked by ``coqc`` in ``tests/envs/test_coq_proof.py``). Some families repeat one
statement shape over a few constants (``2 + 3 = 5``, ``forall n, n + 4 = 4 + n``); the rest
are single lemmas.

====  ==============  ======================================================================
lvl   name            what it takes
====  ==============  ======================================================================
1     ``basic``       one or two steps: computation (``reflexivity``), linear arithmetic on
                      ``nat`` (``lia``), propositional logic (``tauto``, ``intros``/
                      ``split``/``assumption``), case analysis on ``bool``, rewriting
2     ``lists``       the standard library's lists: computation on literals, ``In``, and
                      structural induction with ``++``, ``map``, ``rev``, ``length``,
                      ``repeat`` (library lemmas such as ``app_length`` allowed)
3     ``induction``   recursive functions defined in the task (``double``, ``sum_to``,
                      ``sum_list``, ``evenb``, ``count``, ``my_plus``): induction with
                      ``simpl``, rewriting with the induction hypothesis, arithmetic,
                      auxiliary assertions
====  ==============  ======================================================================

Every lemma is stated after :data:`PRELUDE` (``Arith``, ``Lia``, ``List``, list notations) and,
for level 3, :data:`DEFINITIONS`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

__all__ = ["DEFINITIONS", "LEVELS", "Lemma", "PRELUDE", "lemmas"]

#: what every task file starts with
PRELUDE = "Require Import Arith Lia List.\nImport ListNotations."
#: the level-3 functions (shown to the agent with the statement)
DEFINITIONS = """\
Fixpoint double (n : nat) : nat :=
  match n with 0 => 0 | S k => S (S (double k)) end.
Fixpoint sum_to (n : nat) : nat :=
  match n with 0 => 0 | S k => n + sum_to k end.
Fixpoint sum_list (l : list nat) : nat :=
  match l with [] => 0 | x :: t => x + sum_list t end.
Fixpoint evenb (n : nat) : bool :=
  match n with 0 => true | 1 => false | S (S k) => evenb k end.
Fixpoint count (x : nat) (l : list nat) : nat :=
  match l with [] => 0 | y :: t => (if Nat.eqb x y then 1 else 0) + count x t end.
Fixpoint my_plus (n m : nat) : nat :=
  match n with 0 => m | S k => S (my_plus k m) end."""
#: level number -> name
LEVELS = {1: "basic", 2: "lists", 3: "induction"}


@dataclass(frozen=True)
class Lemma:
    """One task: prove ``Lemma name : statement.`` after the prelude (and definitions).

    Attributes:
        name: the lemma's Coq name (unique in the catalogue).
        level: 1, 2 or 3 (:data:`LEVELS`).
        statement: the proposition, Coq syntax, without the final period.
        proof: the reference proof's text (tactics, without ``Qed.``); the oracle's.
    """

    name: str
    level: int
    statement: str
    proof: str

    @property
    def context(self) -> str:
        """Definitions loaded before the statement ("" below level 3)."""
        return DEFINITIONS if self.level == 3 else ""

    @property
    def declaration(self) -> str:
        """``Lemma name : statement.``, the sentence that opens the proof."""
        return f"Lemma {self.name} : {self.statement}."


_TAUTOLOGIES = [
    "forall P : Prop, P -> P",
    "forall P Q : Prop, P -> (P -> Q) -> Q",
    "forall P Q : Prop, P /\\ Q -> Q /\\ P",
    "forall P Q : Prop, P \\/ Q -> Q \\/ P",
    "forall P Q R : Prop, (P -> Q) -> (Q -> R) -> P -> R",
    "forall P : Prop, P -> ~ ~ P",
    "forall P Q : Prop, ~ (P \\/ Q) -> ~ P /\\ ~ Q",
    "forall P Q R : Prop, (P /\\ Q) /\\ R -> P /\\ (Q /\\ R)",
    "forall P Q R : Prop, P \\/ (Q /\\ R) -> (P \\/ Q) /\\ (P \\/ R)",
]
_BOOLS = [
    ("forall b : bool, negb (negb b) = b", "intros b. destruct b; reflexivity."),
    ("forall b : bool, andb b true = b", "intros b. destruct b; reflexivity."),
    ("forall b : bool, orb b false = b", "intros b. destruct b; reflexivity."),
    ("forall b c : bool, andb b c = andb c b", "intros b c. destruct b, c; reflexivity."),
    ("forall b : bool, andb b (negb b) = false", "intros b. destruct b; reflexivity."),
]
_ARITH = [
    ("forall n : nat, n + 0 = n", "intros n. lia."),
    ("forall n : nat, 0 + n = n", "intros n. reflexivity."),
    ("forall n m : nat, n + m = m + n", "intros n m. lia."),
    ("forall n m p : nat, n + (m + p) = n + m + p", "intros n m p. lia."),
    ("forall n : nat, S n <> 0", "intros n. discriminate."),
    ("forall n : nat, n - n = 0", "intros n. lia."),
    ("forall n m : nat, n <= m -> m <= n -> n = m", "intros n m H1 H2. lia."),
    ("forall n : nat, n = n", "intros n. reflexivity."),
    ("forall n m : nat, n = m -> m = n", "intros n m H. symmetry. exact H."),
    ("forall n m : nat, n = m -> S n = S m", "intros n m H. rewrite H. reflexivity."),
    ("forall n : nat, n * 1 = n", "intros n. lia."),
    ("forall n : nat, n * 0 = 0", "intros n. lia."),
]


def _basic() -> list[Lemma]:
    out = []
    for a, b in [(2, 3), (7, 5), (12, 9), (20, 22), (13, 8)]:
        out.append(Lemma(f"add_{a}_{b}", 1, f"{a} + {b} = {a + b}", "reflexivity."))
    for a, b in [(3, 4), (6, 7), (9, 8), (5, 11), (12, 3)]:
        out.append(Lemma(f"mul_{a}_{b}", 1, f"{a} * {b} = {a * b}", "reflexivity."))
    for a, b in [(3, 7), (0, 5), (10, 12)]:
        out.append(Lemma(f"le_{a}_{b}", 1, f"{a} <= {b}", "lia."))
    for i, (statement, proof) in enumerate(_ARITH):
        out.append(Lemma(f"arith_{i}", 1, statement, proof))
    for k in range(1, 6):
        out.append(
            Lemma(f"add_comm_{k}", 1, f"forall n : nat, n + {k} = {k} + n", "intros n. lia.")
        )
    for k in range(1, 5):
        out.append(Lemma(f"le_add_{k}", 1, f"forall n : nat, n <= n + {k}", "intros n. lia."))
    for k in range(1, 4):
        out.append(
            Lemma(
                f"lt_add_{k}",
                1,
                f"forall n m : nat, n < m -> n + {k} < m + {k}",
                "intros n m H. lia.",
            )
        )
    for k in range(2, 5):
        out.append(
            Lemma(f"mul_comm_{k}", 1, f"forall n : nat, {k} * n = n * {k}", "intros n. lia.")
        )
    for i, statement in enumerate(_TAUTOLOGIES):
        out.append(Lemma(f"taut_{i}", 1, statement, "tauto."))
    for i, (statement, proof) in enumerate(_BOOLS):
        out.append(Lemma(f"bool_{i}", 1, statement, proof))
    return out


_LIST_INDUCTION = "induction l as [|x l IH]"
_LISTS = [
    (
        "app_nil",
        "forall (A : Type) (l : list A), l ++ [] = l",
        f"intros A l. {_LIST_INDUCTION}. - reflexivity. - simpl. rewrite IH. reflexivity.",
    ),
    ("nil_app", "forall (A : Type) (l : list A), [] ++ l = l", "intros A l. reflexivity."),
    (
        "length_cons",
        "forall (A : Type) (x : A) (l : list A), length (x :: l) = S (length l)",
        "intros A x l. reflexivity.",
    ),
    (
        "length_app",
        "forall (A : Type) (l1 l2 : list A), length (l1 ++ l2) = length l1 + length l2",
        "intros A l1 l2. induction l1 as [|x l1 IH]; simpl; lia.",
    ),
    (
        "app_assoc3",
        "forall (A : Type) (l1 l2 l3 : list A), (l1 ++ l2) ++ l3 = l1 ++ (l2 ++ l3)",
        "intros A l1 l2 l3. induction l1 as [|x l1 IH]. - reflexivity. - simpl. rewrite IH. reflexivity.",
    ),
    (
        "map_app2",
        "forall (A B : Type) (f : A -> B) (l1 l2 : list A), map f (l1 ++ l2) = map f l1 ++ map f l2",
        "intros A B f l1 l2. induction l1 as [|x l1 IH]. - reflexivity. - simpl. rewrite IH. reflexivity.",
    ),
    (
        "map_length2",
        "forall (A B : Type) (f : A -> B) (l : list A), length (map f l) = length l",
        f"intros A B f l. {_LIST_INDUCTION}; simpl; lia.",
    ),
    (
        "rev_length2",
        "forall (A : Type) (l : list A), length (rev l) = length l",
        f"intros A l. {_LIST_INDUCTION}. - reflexivity. - simpl. rewrite app_length. simpl. lia.",
    ),
    (
        "rev_app",
        "forall (A : Type) (l1 l2 : list A), rev (l1 ++ l2) = rev l2 ++ rev l1",
        "intros A l1 l2. induction l1 as [|x l1 IH]. - simpl. rewrite app_nil_r. reflexivity. "
        "- simpl. rewrite IH. rewrite app_assoc. reflexivity.",
    ),
    (
        "rev_rev",
        "forall (A : Type) (l : list A), rev (rev l) = l",
        f"intros A l. {_LIST_INDUCTION}. - reflexivity. "
        "- simpl. rewrite rev_app_distr. simpl. rewrite IH. reflexivity.",
    ),
    (
        "in_head",
        "forall (A : Type) (x : A) (l : list A), In x (x :: l)",
        "intros A x l. simpl. left. reflexivity.",
    ),
    (
        "in_tail",
        "forall (A : Type) (x y : A) (l : list A), In x l -> In x (y :: l)",
        "intros A x y l H. simpl. right. exact H.",
    ),
    (
        "in_app_left",
        "forall (A : Type) (x : A) (l1 l2 : list A), In x l1 -> In x (l1 ++ l2)",
        "intros A x l1 l2 H. apply in_or_app. left. exact H.",
    ),
    (
        "nonempty_length",
        "forall (A : Type) (l : list A), l <> [] -> length l > 0",
        "intros A l H. destruct l as [|x l]. - contradiction. - simpl. lia.",
    ),
    (
        "map_id2",
        "forall (l : list nat), map (fun x => x) l = l",
        f"intros l. {_LIST_INDUCTION}. - reflexivity. - simpl. rewrite IH. reflexivity.",
    ),
    (
        "map_map2",
        "forall (A B C : Type) (f : A -> B) (g : B -> C) (l : list A), "
        "map g (map f l) = map (fun x => g (f x)) l",
        f"intros A B C f g l. {_LIST_INDUCTION}. - reflexivity. - simpl. rewrite IH. reflexivity.",
    ),
    (
        "rev_snoc",
        "forall (A : Type) (x : A) (l : list A), rev (l ++ [x]) = x :: rev l",
        "intros A x l. rewrite rev_app_distr. reflexivity.",
    ),
    (
        "repeat_length2",
        "forall (A : Type) (x : A) (n : nat), length (repeat x n) = n",
        "intros A x n. induction n as [|n IH]; simpl; lia.",
    ),
    (
        "app_nil_sym",
        "forall (A : Type) (l : list A), l ++ [] = [] ++ l",
        "intros A l. rewrite app_nil_r. reflexivity.",
    ),
    (
        "length_app_comm",
        "forall (A : Type) (l1 l2 : list A), length (l1 ++ l2) = length (l2 ++ l1)",
        "intros A l1 l2. rewrite app_length. rewrite app_length. lia.",
    ),
]


def _lists() -> list[Lemma]:
    out = []
    for a, b, c in [(1, 2, 3), (4, 5, 6), (7, 0, 9), (2, 2, 2)]:
        out.append(
            Lemma(f"app_lit_{a}{b}{c}", 2, f"[{a}; {b}] ++ [{c}] = [{a}; {b}; {c}]", "reflexivity.")
        )
    for xs in [(1, 2, 3), (5, 4, 7, 1), (9, 8)]:
        lit = "; ".join(map(str, xs))
        rev = "; ".join(map(str, reversed(xs)))
        out.append(
            Lemma(f"rev_lit_{''.join(map(str, xs))}", 2, f"rev [{lit}] = [{rev}]", "reflexivity.")
        )
    for xs in [(3, 1, 4, 1, 5), (2, 7), (6, 6, 6)]:
        lit = "; ".join(map(str, xs))
        out.append(
            Lemma(
                f"length_lit_{''.join(map(str, xs))}",
                2,
                f"length [{lit}] = {len(xs)}",
                "reflexivity.",
            )
        )
    for xs in [(1, 2, 3), (0, 10)]:
        lit = "; ".join(map(str, xs))
        out.append(
            Lemma(
                f"map_lit_{''.join(map(str, xs))}",
                2,
                f"map S [{lit}] = [{'; '.join(str(x + 1) for x in xs)}]",
                "reflexivity.",
            )
        )
    for x, xs in [(3, (1, 2, 3)), (5, (5, 6)), (4, (1, 4, 9))]:
        lit = "; ".join(map(str, xs))
        out.append(Lemma(f"in_lit_{x}", 2, f"In {x} [{lit}]", "simpl. tauto."))
    out += [Lemma(name, 2, statement, proof) for name, statement, proof in _LISTS]
    return out


_SUM_APP = (
    "assert (Happ : forall l1 l2, sum_list (l1 ++ l2) = sum_list l1 + sum_list l2). "
    "{ intros l1 l2. induction l1 as [|y l1 IH1]; simpl; lia. }"
)
_INDUCTION = [
    (
        "double_mul",
        "forall n : nat, double n = 2 * n",
        "intros n. induction n as [|n IH]; simpl; lia.",
    ),
    (
        "double_plus",
        "forall n : nat, double n = n + n",
        "intros n. induction n as [|n IH]; simpl; lia.",
    ),
    (
        "evenb_double",
        "forall n : nat, evenb (double n) = true",
        "intros n. induction n as [|n IH]. - reflexivity. - simpl. exact IH.",
    ),
    (
        "evenb_double_S",
        "forall n : nat, evenb (S (double n)) = false",
        "intros n. induction n as [|n IH]. - reflexivity. - simpl. exact IH.",
    ),
    (
        "double_add",
        "forall n m : nat, double (n + m) = double n + double m",
        "intros n m. induction n as [|n IH]; simpl; lia.",
    ),
    (
        "sum_to_gauss",
        "forall n : nat, 2 * sum_to n = n * (n + 1)",
        "intros n. induction n as [|n IH]; simpl; nia.",
    ),
    (
        "sum_to_ge",
        "forall n : nat, n <= sum_to n",
        "intros n. induction n as [|n IH]; simpl; lia.",
    ),
    (
        "sum_to_S",
        "forall n : nat, sum_to (S n) = S n + sum_to n",
        "intros n. reflexivity.",
    ),
    (
        "sum_list_app",
        "forall l1 l2 : list nat, sum_list (l1 ++ l2) = sum_list l1 + sum_list l2",
        "intros l1 l2. induction l1 as [|x l1 IH]; simpl; lia.",
    ),
    (
        "sum_list_rev",
        "forall l : list nat, sum_list (rev l) = sum_list l",
        f"intros l. {_SUM_APP} induction l as [|x l IH]. - reflexivity. "
        "- simpl. rewrite Happ. simpl. lia.",
    ),
    (
        "sum_list_map_S",
        "forall l : list nat, sum_list (map S l) = sum_list l + length l",
        "intros l. induction l as [|x l IH]; simpl; lia.",
    ),
    (
        "my_plus_plus",
        "forall n m : nat, my_plus n m = n + m",
        "intros n m. induction n as [|n IH]; simpl; lia.",
    ),
    (
        "my_plus_0",
        "forall n : nat, my_plus n 0 = n",
        "intros n. induction n as [|n IH]. - reflexivity. - simpl. rewrite IH. reflexivity.",
    ),
    (
        "my_plus_S",
        "forall n m : nat, my_plus n (S m) = S (my_plus n m)",
        "intros n m. induction n as [|n IH]. - reflexivity. - simpl. rewrite IH. reflexivity.",
    ),
    (
        "my_plus_double",
        "forall n : nat, my_plus n n = double n",
        "intros n. assert (H : forall a b, my_plus a b = a + b). "
        "{ intros a b. induction a as [|a IH]; simpl; lia. } "
        "rewrite H. induction n as [|n IH]; simpl; lia.",
    ),
    (
        "count_app",
        "forall (x : nat) (l1 l2 : list nat), count x (l1 ++ l2) = count x l1 + count x l2",
        "intros x l1 l2. induction l1 as [|y l1 IH]; simpl; lia.",
    ),
    (
        "count_le_length",
        "forall (x : nat) (l : list nat), count x l <= length l",
        "intros x l. induction l as [|y l IH]. - simpl. lia. - simpl. destruct (Nat.eqb x y); lia.",
    ),
    (
        "count_nil",
        "forall x : nat, count x [] = 0",
        "intros x. reflexivity.",
    ),
    (
        "count_repeat",
        "forall x n : nat, count x (repeat x n) = n",
        "intros x n. induction n as [|n IH]. - reflexivity. "
        "- simpl. rewrite Nat.eqb_refl. rewrite IH. reflexivity.",
    ),
]


def _induction() -> list[Lemma]:
    out = []
    for n in (3, 4, 5, 10):
        out.append(Lemma(f"sum_to_{n}", 3, f"sum_to {n} = {n * (n + 1) // 2}", "reflexivity."))
    for n in (2, 7):
        out.append(Lemma(f"double_{n}", 3, f"double {n} = {2 * n}", "reflexivity."))
    for n in (4, 9):
        out.append(Lemma(f"evenb_{n}", 3, f"evenb {n} = {str(n % 2 == 0).lower()}", "reflexivity."))
    out.append(Lemma("count_lit", 3, "count 2 [1; 2; 3; 2] = 2", "reflexivity."))
    out += [Lemma(name, 3, statement, proof) for name, statement, proof in _INDUCTION]
    return out


@functools.cache
def lemmas() -> tuple[Lemma, ...]:
    """The whole catalogue: level 1, then 2, then 3, each in a fixed order. Never raises."""
    return tuple(_basic() + _lists() + _induction())

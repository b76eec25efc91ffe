"""Structure figures of agentic-rl (issue 38, done-when 2): how far a reader walks, and where code
reaches into what it should only read.

Usage (the ``agentic_rl`` measured is the one on ``PYTHONPATH``; ``--src`` must hold it)::

    PYTHONPATH=TREE/src .venv/bin/python scripts/structure_figures.py [--src TREE/src] [--no-trace]

Prints a short table on stderr and one JSON object on stdout. Paths are relative to
``SRC/agentic_rl``. The measures:

``path_files``, ``path_frames`` (dynamic): a tiny ``agentic-rl train`` runs in this process through
    the command's entry (``agentic_rl.cli.main.main(["train", ...])``: a random 2-layer Llama with
    SmolLM2's tokenizer from ``tests/tiny_models.py``, 1 RL step of 2 tasks × 2 rollouts with the
    default sampling, a 2-demonstration warm-up, 1 held-out task). A global optimizer step
    pre-hook (``torch.optim.optimizer.register_optimizer_step_pre_hook``) takes
    ``traceback.extract_stack()`` at the first optimizer step with an ``rl_step`` frame of
    agentic_rl on the stack (the warm-up's steps have none). Of that stack's agentic_rl frames,
    outermost first: ``path`` is their files with consecutive repeats merged, each with its frames'
    function names (what the README draws); ``path_files`` the number of distinct files;
    ``path_frames`` the frames from ``rl_step`` (counted) to the innermost (counted), the one that
    called ``optimizer.step()``; ``train_frames`` all of them, from ``cli/main.py``'s ``main``.
``step_files`` (dynamic, same run): with ``sys.setprofile`` and ``threading.setprofile`` (threads
    started during the run), the distinct agentic_rl files holding a function (a code object with
    ``CO_NEWLOCALS``: module and class bodies run by an import are not counted) that is called, in
    any thread, from entering ``rl_step`` to that first optimizer step.
``any_annotations``: every ``Any`` (a name ``Any`` or an attribute ``….Any``) inside an annotation of
    a parameter, a return or an annotated assignment in SRC/agentic_rl, string annotations parsed;
    ``bare`` counts annotations that are ``Any`` itself; ``run_fields``: the fields of the classes
    ``Run`` and ``TrainerState`` of trainer/run.py whose annotation holds ``Any``.
``run_mutations``: assignment targets (``=``, ``+=``, annotated; tuple and starred targets
    unpacked) that are an attribute chain on a name ``run``: ``state`` counts ``run.state.…``,
    ``other`` every other ``run.…``; ``items`` counts subscript targets on such a chain
    (``run.state.timings["x"] = …``); ``functions_taking_run``: functions with a parameter ``run``.
``import_cycles``: strongly connected components (more than one module) of the import graph of
    agentic_rl: an edge per ``import``/``from … import`` (absolute ``agentic_rl.…`` or relative) run
    when the module is imported (module and class bodies, ``if``/``try``/``with`` blocks in them;
    not function bodies), to the submodule named when there is one, else to the module; the parent
    packages an import also runs add no edge. ``runtime`` leaves out the imports under
    ``if TYPE_CHECKING:``; ``with_type_checking`` keeps them. Each component is printed with one
    shortest cycle through its first module.
``private_base_fields``: the underscore data attributes the bases ``Env`` (envs/base.py) and
    ``ToolEnv`` (envs/tool_env.py) define (class-level names and ``self._x`` stores in their
    methods), read or written, in modules other than those two, as ``self._x`` inside a subclass
    (by class name, transitively, over SRC/agentic_rl) of the base that defines ``_x``, or as
    ``obj._x`` on anything else. ``own_copies_in_env_subclasses``: the same names as ``self._x`` in
    an ``Env`` subclass that does not inherit them (its own copy of the bookkeeping).
``info_keys_crossing``: outside SRC/agentic_rl/envs, reads of the keys ``tool_calls``,
    ``tool_errors``, ``correct``, ``answer_format_ok``, ``level`` as ``x["key"]`` (load),
    ``x.get("key", …)`` or ``"key" in x``; ``named_info`` counts those whose container's name (the
    last name of ``x``) contains ``info``; ``any_container`` counts all of them (listed).
``trainer_files``: per folder of SRC/agentic_rl/trainer (``.`` = the top level), each module's line
    count (``len(text.splitlines())``); ``files`` and ``lines`` in all.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.util
import io
import itertools
import json
import os
import sys
import threading
import traceback
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]
INFO_KEYS = ("tool_calls", "tool_errors", "correct", "answer_format_ok", "level")
CO_NEWLOCALS = 0x2
RUN_CLASSES = {(os.path.join("trainer", "run.py"), name) for name in ("Run", "TrainerState")}


@dataclass
class Trace:
    """What :func:`trace_train` recorded at the first optimizer step inside ``rl_step``."""

    path: list[tuple[str, list[str]]]  # (file, its frames' functions), outermost first
    path_files: int
    path_frames: int
    train_frames: int
    step_files: list[str] | None  # None: not profiled


def _tiny_model(out: Path) -> Path:
    from agentic_rl.policy.model_loading import load_tokenizer, resolve_model_dir

    spec = importlib.util.spec_from_file_location("_tiny_models", ROOT / "tests" / "tiny_models.py")
    tiny = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tiny)
    return tiny.save_random_llama(load_tokenizer(resolve_model_dir("default")), out)


def train_args(model_dir: Path, output_dir: Path) -> list[str]:
    """The ``agentic-rl train`` arguments of the traced run (tiny sizes, default recipe)."""
    # skip_zero_advantage off: a random model's all-zero advantages still make an update
    sets = [f"model.path='{model_dir}'", f"output_dir='{output_dir}'"] + (
        "model.num_threads=1 algorithm.steps=1 algorithm.tasks_per_step=2 algorithm.group_size=2 "
        "optim.skip_zero_advantage=false warmup.num_demos=2 warmup.batch_size=2 eval.size=1 "
        "eval.base=false tracking.tensorboard=false rollout.max_new_tokens=48"
    ).split()
    return ["train", *(a for s in sets for a in ("--set", s))]


def trace_train(workdir: Path, *, model_dir: Path | None = None, profile: bool = True) -> Trace:
    """Run the tiny ``agentic-rl train`` in this process and trace its first RL optimizer step.

    Args:
        workdir: an empty folder for the model (unless ``model_dir``) and the run directory.
        model_dir: a tiny model folder to train (default: one built in ``workdir``).
        profile: also record ``step_files`` (slower: a profile function sees every call).

    Raises:
        RuntimeError: the command failed, or no optimizer step ran inside ``rl_step``.
    """
    import torch.optim.optimizer as optim_mod

    import agentic_rl
    from agentic_rl.cli.main import main

    prefix = os.path.dirname(agentic_rl.__file__) + os.sep
    model_dir = model_dir or _tiny_model(workdir / "tiny-llama")
    seen: dict = {"stack": None, "active": False}
    called: set[str] = set()

    def hook(optimizer, args, kwargs):
        stack = traceback.extract_stack() if seen["stack"] is None else []
        if any(f.name == "rl_step" and f.filename.startswith(prefix) for f in stack):
            seen["stack"], seen["active"] = stack, False

    def prof(frame, event, arg):
        if event != "call" or seen["stack"] is not None:
            return
        code = frame.f_code
        if not seen["active"]:
            if code.co_name != "rl_step" or not code.co_filename.startswith(prefix):
                return
            seen["active"] = True
        if code.co_filename.startswith(prefix) and code.co_flags & CO_NEWLOCALS:
            called.add(code.co_filename)

    handle = optim_mod.register_optimizer_step_pre_hook(hook)
    if profile:
        threading.setprofile(prof)
        sys.setprofile(prof)
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(train_args(model_dir, workdir / "runs"))
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
        handle.remove()
    if status != 0:
        raise RuntimeError(f"agentic-rl train exited {status}: {err.getvalue()[-2000:]}")
    if seen["stack"] is None:
        raise RuntimeError("no optimizer step ran inside rl_step")
    frames = [f for f in seen["stack"] if f.filename.startswith(prefix)]
    by_file = itertools.groupby(frames, key=lambda f: os.path.relpath(f.filename, prefix))
    path = [(rel, [f.name for f in group]) for rel, group in by_file]
    first = next(i for i, f in enumerate(frames) if f.name == "rl_step")
    step_files = sorted(os.path.relpath(f, prefix) for f in called) if profile else None
    return Trace(path, len({p for p, _ in path}), len(frames) - first, len(frames), step_files)


def _annotation_anys(node: ast.expr | None) -> tuple[int, bool]:
    """(``Any`` count, whether the annotation is ``Any`` itself) of one annotation."""
    if node is None:
        return 0, False
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            node = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return 0, False
    return sum(map(_is_any, ast.walk(node))), _is_any(node)


def _is_any(node: ast.AST) -> bool:
    return getattr(node, "id", None) == "Any" or getattr(node, "attr", None) == "Any"


def any_annotations(trees: dict[str, ast.Module]) -> dict:
    """The ``any_annotations`` figure (module docstring)."""
    total = bare = 0
    files = set()
    run_fields = {}
    for rel, tree in trees.items():
        for node in ast.walk(tree):
            annotations = []
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                params = [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]
                annotations = [p.annotation for p in params if p is not None] + [node.returns]
            elif isinstance(node, ast.AnnAssign):
                annotations = [node.annotation]
            for ann in annotations:
                n, is_bare = _annotation_anys(ann)
                total, bare = total + n, bare + is_bare
                files.update([rel] if n else [])
            if isinstance(node, ast.ClassDef) and (rel, node.name) in RUN_CLASSES:
                for item in node.body:
                    if isinstance(item, ast.AnnAssign) and _annotation_anys(item.annotation)[0]:
                        key = f"{node.name}.{ast.unparse(item.target)}"
                        run_fields[key] = ast.unparse(item.annotation)
    return {"total": total, "bare": bare, "files": len(files), "run_fields": run_fields}


def _chain_root(node: ast.expr) -> list[str] | None:
    """``["run", "state", "x"]`` for ``run.state.x`` (attributes on a name), else None."""
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    return [node.id, *reversed(names)] if isinstance(node, ast.Name) else None


def _targets(node: ast.AST) -> list[ast.expr]:
    """The names, attributes and subscripts an ``=``, ``+=`` or annotated assignment assigns."""
    found = [*node.targets] if isinstance(node, ast.Assign) else []
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        found = [node.target]
    out = []
    while found:
        t = found.pop()
        if isinstance(t, (ast.Tuple, ast.List)):
            found.extend(t.elts)
        elif isinstance(t, ast.Starred):
            found.append(t.value)
        else:
            out.append(t)
    return out


def run_mutations(trees: dict[str, ast.Module]) -> dict:
    """The ``run_mutations`` figure (module docstring)."""
    counts = {"state": 0, "other": 0, "items": 0}
    by_file: dict[str, int] = defaultdict(int)
    taking_run = 0
    for rel, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                taking_run += any(p.arg == "run" for p in [*a.posonlyargs, *a.args, *a.kwonlyargs])
            for t in _targets(node):
                kind = None
                if isinstance(t, ast.Subscript):
                    chain = _chain_root(t.value)
                    kind = "items" if chain and chain[0] == "run" and len(chain) > 1 else None
                elif (chain := _chain_root(t)) and chain[0] == "run" and len(chain) > 1:
                    kind = "state" if chain[1] == "state" and len(chain) > 2 else "other"
                if kind:
                    counts[kind] += 1
                    by_file[rel] += 1
    return {**counts, "functions_taking_run": taking_run, "by_file": dict(sorted(by_file.items()))}


def _import_time_imports(body: list[ast.stmt], typing_only: bool = False):
    """(import node, under ``if TYPE_CHECKING``) for the imports a module body runs on import."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, typing_only
        elif isinstance(node, ast.If):
            yield from _import_time_imports(
                node.body, typing_only or "TYPE_CHECKING" in (_chain_root(node.test) or [])[-1:]
            )
            yield from _import_time_imports(node.orelse, typing_only)
        elif isinstance(node, (ast.Try, ast.With, ast.For, ast.While, ast.ClassDef)):
            for field in ("body", "orelse", "finalbody"):
                yield from _import_time_imports(getattr(node, field, []), typing_only)
            for handler in getattr(node, "handlers", []):
                yield from _import_time_imports(handler.body, typing_only)


def import_graph(trees: dict[str, ast.Module]) -> dict[str, dict[str, bool]]:
    """Module → {imported module: only under ``if TYPE_CHECKING``} over agentic_rl's ``trees``."""
    names = {rel: ".".join(("agentic_rl", *Path(rel).with_suffix("").parts)) for rel in trees}
    modules = {n.removesuffix(".__init__") for n in names.values()}
    graph: dict[str, dict[str, bool]] = {m: {} for m in modules}
    for rel, tree in trees.items():
        mod = names[rel].removesuffix(".__init__")
        package = mod if names[rel].endswith(".__init__") else mod.rpartition(".")[0]
        for node, typing_only in _import_time_imports(tree.body):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, *([base] if base else [])])
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                    for a in node.names
                ]
            for target in targets:
                if target in modules and target != mod:
                    graph[mod][target] = graph[mod].get(target, True) and typing_only
    return graph


def _cycles(edges: dict[str, set[str]]) -> list[dict]:
    """Each strongly connected component of more than one module (sorted), with one shortest
    cycle through its first module."""
    graph = nx.DiGraph([(m, t) for m, targets in edges.items() for t in targets])
    out = []
    for comp in sorted(sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1):
        sub, start = graph.subgraph(comp), comp[0]
        back = [nx.shortest_path(sub, start, p) for p in sub.predecessors(start)]
        out.append({"modules": comp, "cycle": [*min(back, key=len), start]})
    return out


def import_cycles(trees: dict[str, ast.Module]) -> dict[str, list[dict]]:
    """The ``import_cycles`` figure (module docstring): ``runtime`` and ``with_type_checking``."""
    graph = import_graph(trees)
    return {
        key: _cycles(
            {m: {t for t, typing in e.items() if keep or not typing} for m, e in graph.items()}
        )
        for key, keep in (("runtime", False), ("with_type_checking", True))
    }


def _base_fields(trees: dict[str, ast.Module], rel: str, name: str) -> set[str]:
    """The underscore data attributes the class ``name`` of module ``rel`` defines."""
    fields = set()
    for cls in (c for c in ast.walk(trees[rel]) if getattr(c, "name", None) == name):
        fields.update(t.id for n in cls.body for t in _targets(n) if isinstance(t, ast.Name))
        for node in ast.walk(cls):
            chains = [_chain_root(t) or [] for t in _targets(node)]
            fields.update(c[1] for c in chains if len(c) == 2 and c[0] == "self")
    return {f for f in fields if f.startswith("_") and not f.startswith("__")}


def private_base_fields(trees: dict[str, ast.Module]) -> dict:
    """The ``private_base_fields`` figure (module docstring)."""
    bases = {os.path.join("envs", "base.py"): "Env", os.path.join("envs", "tool_env.py"): "ToolEnv"}
    owner = {f: name for rel, name in bases.items() for f in _base_fields(trees, rel, name)}
    parents: dict[str, set[str]] = defaultdict(set)
    for cls in (c for tree in trees.values() for c in ast.walk(tree)):
        if isinstance(cls, ast.ClassDef):
            parents[cls.name].update(ast.unparse(b).rpartition(".")[2] for b in cls.bases)

    def ancestors(name: str) -> set[str]:
        found, todo = set(), list(parents.get(name, ()))
        while todo:
            if (p := todo.pop()) not in found:
                found.add(p)
                todo.extend(parents.get(p, ()))
        return found

    refs: dict[str, int] = defaultdict(int)
    by_file: dict[str, int] = defaultdict(int)
    own = 0  # the same names kept by an Env subclass that does not inherit them (its own copy)
    for rel, tree in ((r, t) for r, t in trees.items() if r not in bases):
        lineage = {}
        for cls in (c for c in ast.walk(tree) if isinstance(c, ast.ClassDef)):
            lineage.update((id(n), ancestors(cls.name)) for n in ast.walk(cls))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and node.attr in owner):
                continue
            on_self = getattr(node.value, "id", None) == "self"
            if not on_self or owner[node.attr] in lineage.get(id(node), ()):
                refs[node.attr] += 1
                by_file[rel] += 1
            elif "Env" in lineage.get(id(node), ()):
                own += 1
    return {
        "fields": sorted(owner),
        "total": sum(refs.values()),
        "files": len(by_file),
        "by_field": dict(sorted(refs.items())),
        "by_file": dict(sorted(by_file.items())),
        "own_copies_in_env_subclasses": own,
    }


def info_keys_crossing(trees: dict[str, ast.Module]) -> dict:
    """The ``info_keys_crossing`` figure (module docstring)."""
    found = []
    for rel, tree in trees.items():
        if rel.startswith("envs" + os.sep):
            continue
        for node in ast.walk(tree):
            key = container = None
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
                key, container = node.slice, node.value
            elif (
                isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "get" and node.args
            ):
                key, container = node.args[0], node.func.value
            elif isinstance(node, ast.Compare) and isinstance(node.ops[0], (ast.In, ast.NotIn)):
                key, container = node.left, node.comparators[0]
            if isinstance(key, ast.Constant) and key.value in INFO_KEYS:
                last = ast.unparse(container).rpartition(".")[2].split("[")[0]
                found.append((f"{rel}:{node.lineno}", key.value, "info" in last.lower()))
    return {
        "named_info": sum(named for *_, named in found),
        "any_container": len(found),
        "reads": [f"{where} {key}" for where, key, _ in found],
    }


def trainer_files(pkg: Path) -> dict:
    """The ``trainer_files`` figure (module docstring)."""
    folders: dict[str, dict[str, int]] = defaultdict(dict)
    for path in sorted((pkg / "trainer").rglob("*.py")):
        rel = path.relative_to(pkg / "trainer")
        folders[str(rel.parent)][rel.name] = len(path.read_text(encoding="utf-8").splitlines())
    lines = sum(sum(v.values()) for v in folders.values())
    return {"files": sum(map(len, folders.values())), "lines": lines, "folders": dict(folders)}


def parse_package(pkg: Path) -> dict[str, ast.Module]:
    """Every module of the package folder ``pkg``, parsed, by its path relative to ``pkg``."""
    return {
        str(p.relative_to(pkg)): ast.parse(p.read_text(encoding="utf-8"), str(p))
        for p in sorted(pkg.rglob("*.py"))
    }


def figures(src: Path, trace: Trace | None) -> dict:
    """Every figure of the module docstring for the tree ``src`` (``trace``: the dynamic ones)."""
    pkg = src / "agentic_rl"
    trees = parse_package(pkg)
    out: dict = {"src": str(src)}
    if trace is not None:
        out.update(asdict(trace))
        out["path"] = [f"{f}  {' → '.join(names)}" for f, names in trace.path]
    out["any_annotations"] = any_annotations(trees)
    out["run_mutations"] = run_mutations(trees)
    out["import_cycles"] = import_cycles(trees)
    out["private_base_fields"] = private_base_fields(trees)
    out["info_keys_crossing"] = info_keys_crossing(trees)
    out["trainer_files"] = trainer_files(pkg)
    return out


def headline(fig: dict) -> dict[str, object]:
    """The headline numbers of :func:`figures`, by label (None: not measured)."""
    anys, muts, cycles = fig["any_annotations"], fig["run_mutations"], fig["import_cycles"]
    private, info = fig["private_base_fields"], fig["info_keys_crossing"]
    return {
        "files on the path train → optimizer.step()": fig.get("path_files"),
        "agentic_rl frames rl_step → optimizer.step()": fig.get("path_frames"),
        "files called in one RL step": len(fig["step_files"]) if fig.get("step_files") else None,
        "Any in annotations (bare)": f"{anys['total']} ({anys['bare']})",
        "Any on Run/TrainerState fields": len(anys["run_fields"]),
        "assignments to run.state.* / other run.*": f"{muts['state']} / {muts['other']}",
        "functions taking run": muts["functions_taking_run"],
        "import cycles (runtime / with TYPE_CHECKING)": " / ".join(
            map(str, map(len, cycles.values()))
        ),
        "private base fields used elsewhere (files)": f"{private['total']} ({private['files']})",
        "info keys read outside envs (named info)": f"{info['any_container']} ({info['named_info']})",
        "trainer files / lines": "{files} / {lines}".format(**fig["trainer_files"]),
    }


def table(fig: dict) -> str:
    """A short text table of :func:`headline`, the traced path and the import cycles."""
    lines = [f"{k:<46} {'-' if v is None else v}" for k, v in headline(fig).items()]
    lines += [f"  path: {p}" for p in fig.get("path", [])]
    for key, comps in fig["import_cycles"].items():
        lines += [f"  cycle ({key}): {' → '.join(c['cycle'])}" for c in comps]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", type=Path, help="the tree's src folder (default: agentic_rl's)")
    parser.add_argument("--no-trace", action="store_true", help="static figures only (no run)")
    parser.add_argument("--no-profile", action="store_true", help="trace without step_files")
    args = parser.parse_args(argv)
    import agentic_rl

    imported = Path(agentic_rl.__file__).resolve().parent.parent
    src = (args.src or imported).resolve()
    if not args.no_trace and src != imported:
        print(f"error: agentic_rl is imported from {imported}, not --src {src}", file=sys.stderr)
        return 2
    trace = None
    if not args.no_trace:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="structure-") as tmp:
            trace = trace_train(Path(tmp), profile=not args.no_profile)
    fig = figures(src, trace)
    print(table(fig), file=sys.stderr)
    print(json.dumps(fig, indent=1, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())

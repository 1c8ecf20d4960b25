"""Measure the house: the import graph of harness/, goldens/ and kernels/.

Every `import` and `from ... import` statement is read from the source with `ast`
(nothing is imported), at module level and inside functions (lazy imports) alike,
and resolved to the installed names: goldens/ is harness.goldens, kernels/ is
harness.kernels. `from a.b import c` points at the module a.b.c when c is a module,
else at a.b. Imports of anything outside these three folders are left out.

Definitions (the figures docs/architecture.md quotes):

- modules: every .py file, named as installed.
- rooms: the top-level modules of harness/ (harness.ops, harness.errors, ...; not
  harness/__init__.py) and its subpackages, a subpackage being one room however deep
  (harness.run, harness.worker, ...); harness.goldens and harness.kernels are one room
  each. The room graph has an arrow A -> B when some module of A imports one of B.
- floors: the number of rooms on the longest chain of the room graph once each
  circle is collapsed into one room (a house with no arrows has one floor).
- circles: strongly connected components with more than one member, of the room
  graph and of the module graph (a module importing its own package's __init__ and
  the __init__ importing it back counts too).
- arrows back up: the fewest arrows one would have to remove to break every circle
  (a minimum feedback arc set, exact per component, of rooms and of modules). With
  no circles there are none.
- flat modules: the top-level modules of harness/ other than __init__ and __main__.
- lines: physical lines of .py files (the core = harness/ without goldens/kernels and the
  packs).
- packs: each op pack (harness/packs/NAME/) is a room of its own, as goldens/ and kernels/
  are: the core loads a pack by its name (importlib), never by an import statement, so a
  pack's imports of the core are arrows down.  harness.packs itself (the registry and
  api.py) is the core's room for them.

Run `.venv/bin/python bench/house.py` (add --json for machine-readable output,
--edges ROOM to list one room's arrows with the importing module and line, --root DIR
to measure another checkout).
"""

from __future__ import annotations

import argparse
import ast
import itertools
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# source folder -> installed package name
TREES = {"harness": "harness", "goldens": "harness.goldens", "kernels": "harness.kernels"}


def discover(root: Path = ROOT) -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for folder, installed in TREES.items():
        base = root / folder
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(base).with_suffix("")
            parts = list(rel.parts)
            if parts[0] in ("goldens", "kernels") and folder == "harness":
                continue  # defensive: never two names for one file
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join([installed, *parts]) if parts else installed
            modules[name] = path
    return modules


def _package_of(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _resolve(base: str, modules: dict[str, Path]) -> str | None:
    """The longest known module that `base` names or lies in."""
    while base:
        if base in modules:
            return base
        base = base.rpartition(".")[0]
    return None


def imports(modules: dict[str, Path]) -> list[tuple[str, str, int, bool]]:
    """(importer, imported, line, lazy) for every import inside the trees."""
    out = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        lazy_lines: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for inner in ast.walk(node):
                    if isinstance(inner, (ast.Import, ast.ImportFrom)):
                        lazy_lines.add(id(inner))
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    pkg = _package_of(name, path).split(".")
                    pkg = pkg[: len(pkg) - (node.level - 1)]
                    base = ".".join(pkg + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                targets = [f"{base}.{alias.name}" for alias in node.names] or [base]
            else:
                continue
            for target in targets:
                # installed names only: kernels.x / goldens.x are not how the package is imported
                resolved = _resolve(target, modules)
                if resolved and resolved != name:
                    out.append((name, resolved, node.lineno, id(node) in lazy_lines))
    return out


def room_of(module: str) -> str:
    for special in ("harness.goldens", "harness.kernels"):
        if module == special or module.startswith(special + "."):
            return special
    parts = module.split(".")
    if parts[:2] == ["harness", "packs"] and len(parts) > 2 and parts[2] != "api":
        return ".".join(parts[:3])      # a pack: loaded by name, a room of its own
    return ".".join(parts[:2]) if len(parts) > 1 else module


def is_pack(module: str) -> bool:
    """A module of an op pack (harness/packs/NAME/), not the API the packs are written against."""
    return room_of(module).count(".") == 2 and room_of(module).startswith("harness.packs.")


def scc(nodes, edges) -> list[list[str]]:
    """Tarjan's strongly connected components, iteratively."""
    graph = {n: sorted({b for a, b in edges if a == n}) for n in nodes}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    comps: list[list[str]] = []
    counter = itertools.count()
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = next(counter)
        stack.append(root)
        on.add(root)
        while work:
            node, it = work[-1]
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = next(counter)
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(graph[nxt])))
                    break
                if nxt in on:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        top = stack.pop()
                        on.discard(top)
                        comp.append(top)
                        if top == node:
                            break
                    comps.append(sorted(comp))
    return comps


def feedback_arcs(comp: list[str], edges: set[tuple[str, str]]) -> list[tuple[str, str]]:
    """A minimum set of arrows whose removal leaves `comp` acyclic.

    Exact (the best of all orders) up to 8 members, greedy by out-minus-in degree above.
    """
    inner = [(a, b) for a, b in edges if a in comp and b in comp]
    if len(comp) <= 8:
        best = None
        for order in itertools.permutations(comp):
            pos = {n: i for i, n in enumerate(order)}
            back = [(a, b) for a, b in inner if pos[a] > pos[b]]
            if best is None or len(back) < len(best):
                best = back
        return sorted(best or [])
    rest, order = set(comp), []
    while rest:
        pick = max(sorted(rest), key=lambda n: sum(1 for a, b in inner if a == n and b in rest)
                   - sum(1 for a, b in inner if b == n and a in rest))
        order.append(pick)
        rest.discard(pick)
    pos = {n: i for i, n in enumerate(order)}
    return sorted((a, b) for a, b in inner if pos[a] > pos[b])


def longest_chain(nodes, edges) -> int:
    comps = scc(nodes, edges)
    comp_of = {n: i for i, c in enumerate(comps) for n in c}
    dag = {(comp_of[a], comp_of[b]) for a, b in edges if comp_of[a] != comp_of[b]}
    succ: dict[int, list[int]] = {}
    for a, b in dag:
        succ.setdefault(a, []).append(b)
    memo: dict[int, int] = {}

    def depth(c: int) -> int:
        if c not in memo:
            memo[c] = 1 + max((depth(n) for n in succ.get(c, [])), default=0)
        return memo[c]

    sys.setrecursionlimit(10000)
    return max((depth(i) for i in range(len(comps))), default=0)


def measure(root: Path = ROOT) -> dict:
    modules = discover(root)
    found = imports(modules)
    mod_edges = {(a, b) for a, b, _, _ in found}
    rooms = sorted({room_of(m) for m in modules if m != "harness"})
    room_edges = {(room_of(a), room_of(b)) for a, b in mod_edges
                  if room_of(a) != room_of(b) and "harness" not in (a, b)}
    room_circles = [c for c in scc(rooms, room_edges) if len(c) > 1]
    mod_circles = [c for c in scc(list(modules), mod_edges) if len(c) > 1]
    flat = sorted(m for m in modules if m.count(".") == 1 and modules[m].parent == root / "harness"
                  and modules[m].name not in ("__init__.py", "__main__.py"))

    def lines(paths):
        return sum(len(p.read_text().splitlines()) for p in paths)

    core = [p for m, p in modules.items() if room_of(m) not in ("harness.goldens", "harness.kernels")
            and not is_pack(m)]
    packs = [p for m, p in modules.items() if is_pack(m)]
    worker = [p for m, p in modules.items() if room_of(m) == "harness.worker"]
    return {
        "modules": len(modules),
        "rooms": len(rooms),
        "floors": longest_chain(rooms, room_edges),
        "room_circles": room_circles,
        "room_arrows_back_up": [list(e) for c in room_circles for e in feedback_arcs(c, room_edges)],
        "module_circles": mod_circles,
        "module_arrows_back_up": [list(e) for c in mod_circles for e in feedback_arcs(c, mod_edges)],
        "imports": len(found),
        "lazy_imports": sum(1 for *_, lazy in found if lazy),
        "flat_modules": len(flat),
        "flat_module_names": [m.split(".", 1)[1] for m in flat],
        "worker_modules": len(worker),
        "worker_lines": lines(worker),
        "flat_lines": lines(modules[m] for m in flat),
        "core_lines": lines(core),
        "pack_lines": lines(packs),
        "_found": found,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--edges", metavar="ROOM", help="list ROOM's arrows in and out, with module:line")
    ap.add_argument("--root", type=Path, default=ROOT,
                    help="the checkout to measure (e.g. `git archive REV | tar -x -C DIR` for a before figure)")
    args = ap.parse_args(argv)
    m = measure(args.root.resolve())
    found = m.pop("_found")
    if args.edges:
        for a, b, line, lazy in sorted(set(found)):
            if (room_of(a) == args.edges) != (room_of(b) == args.edges):
                print(f"{a}:{line} -> {b}{'  (lazy)' if lazy else ''}")
        return 0
    if args.json:
        print(json.dumps(m, indent=1))
        return 0
    print(f"rooms            {m['rooms']}")
    print(f"floors           {m['floors']}")
    print(f"circles (rooms)  {len(m['room_circles'])}  {m['room_circles']}")
    print(f"circles (modules){len(m['module_circles']):>2}  {m['module_circles']}")
    print(f"arrows back up   rooms {len(m['room_arrows_back_up'])} {m['room_arrows_back_up']}")
    print(f"                 modules {len(m['module_arrows_back_up'])} {m['module_arrows_back_up']}")
    print(f"modules          {m['modules']} ({m['imports']} imports, {m['lazy_imports']} lazy)")
    print(f"flat modules     {m['flat_modules']} ({m['flat_lines']} lines): {' '.join(m['flat_module_names'])}")
    print(f"worker/          {m['worker_modules']} modules, {m['worker_lines']} lines")
    print(f"lines in core    {m['core_lines']} (harness/, without goldens/, kernels/ and the packs)")
    print(f"lines in packs   {m['pack_lines']} (harness/packs/NAME/)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The package's shape, checked: no import cycle among its modules, no module too long to read,
no reach into another module's private names, and a plain top-level package."""

from __future__ import annotations

import ast
import pathlib
import re
import subprocess
import sys
from collections.abc import Callable

import shardwright
from shardwright.common.vocabulary import OutputFormat

SRC = pathlib.Path(shardwright.__file__).parent
MAX_LINES = 500
MAX_FUNCTION_LINES = 80


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(SRC.rglob("*.py"))}
# C extensions built at install (`_cseg.c` -> `shardwright.codecs._cseg`): modules too.
EXTENSIONS = {_module_name(p) for p in SRC.rglob("*.c")}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(
    name: str, path: pathlib.Path, *, type_checking: bool = False
) -> list[tuple[str, str, int]]:
    """(imported module, imported name or '', line) for every import of a shardwright module,
    at any depth (function-level imports count: they must not hide a cycle), except those
    under `if TYPE_CHECKING:`, which never run (counted too with `type_checking`)."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[str, str, int]] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child) and not type_checking:
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, ast.Import):
                found.extend((a.name, "", child.lineno) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                found.extend((base, a.name, child.lineno) for a in child.names)
            visit(child)

    visit(tree)
    return [f for f in found if f[0] == "shardwright" or f[0].startswith("shardwright.")]


def _edges() -> dict[str, set[str]]:
    """Module -> the shardwright modules its imports execute by name (a `from pkg import x`
    where x is a submodule imports pkg.x; the parents a dotted import runs first are not
    counted: Python finds them already importing and a cycle through them is harmless)."""
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for name, path in MODULES.items():
        for module, member, _ in _imports(name, path):
            submodule = f"{module}.{member}"
            if submodule in EXTENSIONS:
                continue  # compiled code imports nothing of ours
            target = submodule if submodule in MODULES else module
            if target in MODULES and target != name:
                graph[name].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))
    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def test_the_import_graph_has_no_cycle() -> None:
    assert len(MODULES) > 50
    cycles = _cycles(_edges())
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def _room(module: str) -> str:
    """The layer a module lives in: its top-level package (a root module is its own), each
    format's driver modules one room above the formats' bytes."""
    parts = module.split(".")
    if _is_driver(module):
        return "formats drivers"
    return parts[1] if len(parts) > 1 else parts[0]


def test_the_layers_import_each_other_one_way() -> None:
    """No arrow back up: the layers (packages) form no circle through their modules' imports,
    so each sits above those it imports (a circle of rooms is named with one import each
    way)."""
    rooms: dict[str, set[str]] = {_room(name): set() for name in MODULES}
    example: dict[tuple[str, str], str] = {}
    for name, targets in _edges().items():
        for target in targets:
            a, b = _room(name), _room(target)
            if a != b:
                rooms[a].add(b)
                example.setdefault((a, b), f"{name} -> {target}")
    assert len(rooms) > 15
    cycles = _cycles(rooms)
    named = [[example[(a, b)] for a in c for b in c if (a, b) in example] for c in cycles]
    assert not cycles, named


def test_the_cycle_check_finds_a_cycle() -> None:
    """The check above can fail: a two-module loop and a three-module loop are found."""
    graph = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}}
    assert sorted(_cycles(graph)) == [["a", "b"], ["c", "d", "e"]]


def test_no_module_is_too_long_to_read() -> None:
    long = {
        name: n
        for name, path in MODULES.items()
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_no_function_is_too_long_to_read() -> None:
    """A function of more than MAX_FUNCTION_LINES lines does several things: split it."""
    long = [
        f"{name}.{node.name}: {node.end_lineno - node.lineno + 1} lines"
        for name, path in MODULES.items()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and (node.end_lineno or node.lineno) - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, "\n".join(long)


def test_the_memory_budget_is_divided_in_one_place() -> None:
    """Each share of a task's memory is `common/memory.MemoryBudget`'s to say: no module
    divides the budget itself."""
    dividing = re.compile(r"memory_budget\s*//")
    found = [name for name, path in MODULES.items() if dividing.search(path.read_text())]
    assert not found, found


def test_no_module_imports_another_modules_private_names() -> None:
    reaches = [
        f"{name}:{line} imports {module}.{member}"
        for name, path in MODULES.items()
        for module, member, line in _imports(name, path)
        if member.startswith("_")
        and not member.startswith("__")
        and f"{module}.{member}" not in MODULES.keys() | EXTENSIONS
    ]
    assert not reaches, "\n".join(reaches)


def test_import_shardwright_is_a_plain_package_with_its_api() -> None:
    """`import shardwright` shows the whole API in dir() and __all__ before any of it is used
    (the heavy parts load on first use: `shardwright.api` is not imported yet), each name
    with a docstring, and importing any submodule (even one named like an API function once
    was) leaves the API in place; a name it does not have is an AttributeError."""
    script = (
        "import shardwright, sys, types, json\n"
        "names = ['plan', 'convert', 'verify', 'view', 'open_source', 'ConvertOptions',\n"
        "         'Manifest', 'errors', 'precomputed', 'zarr3', 'add_segment_properties',\n"
        "         'status']\n"
        "listed = {n: n in dir(shardwright) and n in shardwright.__all__ for n in names}\n"
        "loaded = 'shardwright.api' in sys.modules\n"
        "import shardwright.planning, shardwright.verification, shardwright.engine.cpu\n"
        "out = {n: (listed[n], bool(getattr(shardwright, n).__doc__),\n"
        "           isinstance(getattr(shardwright, n), types.ModuleType)) for n in names}\n"
        "out['class'] = type(shardwright) is types.ModuleType\n"
        "out['api loaded at import'] = loaded\n"
        "out['version'] = shardwright.__version__\n"
        "out['unknown'] = not hasattr(shardwright, 'no_such_name')\n"
        "print(json.dumps(out))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    import json

    out = json.loads(done.stdout)
    assert out.pop("class") is True
    assert out.pop("api loaded at import") is False
    assert out.pop("version") == shardwright.__version__
    assert out.pop("unknown") is True
    modules = {"errors", "precomputed", "zarr3"}
    assert out == {n: [True, True, n in modules] for n in out}
    assert set(out) | {"__version__"} == set(shardwright.__all__)


def test_shard_tasks_take_decisions_from_the_plan_not_the_options() -> None:
    """What a shard task does is decided at plan time: the engine and job modules read the
    plan's resolved choices (encoder, level, budgets); only `engine_for` reads the engine's
    name, once per dataset."""
    readers = {}
    for folder in ("engine", "jobs"):
        for path in sorted((SRC / folder).glob("*.py")):
            lines = [
                line.strip()
                for line in path.read_text().splitlines()
                if re.search(r"\boptions\.[a-z_]+", line) and not line.lstrip().startswith("#")
            ]
            if lines:
                readers[f"{folder}/{path.name}"] = lines
    assert readers == {"engine/engines.py": ["return ENGINES[plan.options.engine]"]}


def test_each_closed_set_of_names_is_written_once() -> None:
    """Formats, dataset kinds, hashes, index locations, volume types and blosc's names are
    `StrEnum`s of `common/vocabulary.py`; no module spells a whole set out again (in any
    order)."""
    from itertools import permutations

    from shardwright.common import vocabulary

    sets = [vocabulary.OutputFormat, vocabulary.DatasetKind, vocabulary.ShardHash,
            vocabulary.IndexLocation, vocabulary.VolumeType, vocabulary.BloscName,
            vocabulary.BloscShuffle]  # fmt: skip
    spelled = {
        ", ".join(f'"{name}"' for name in order)
        for kind in sets
        for order in permutations(vocabulary.names(kind))
    }
    again = [
        f"{name}: ({literal})"
        for name, path in MODULES.items()
        if name != "shardwright.common.vocabulary"
        for literal in spelled
        if f"({literal})" in path.read_text()
    ]
    assert not again, again


FORMAT_TESTS = re.compile(
    r"isinstance\([^)]*Layout\b"  # which layout class a plan holds
    r"|\b(plan|base|volume|level|self\.plan)\.format\s*(==|!=|\bin\b)"  # a plan's format name
    r"|\.layout\.format\s*(==|!=|\bin\b)"
    r"|\.format\s*(==|!=)\s*[\"'A-Z]"  # any object's format against a name or a member
    r"|\[[\"']format[\"']\]\s*(==|!=)"  # a described plan's
    r"|\.(info|zarr) is (not )?None"  # the two optional documents plans once carried
)


DRIVER_MODULES = ("layout", "producers", "driver")  # a format's driver, in its folder
# and what verify asks of its datasets, and an addition of those that exist
DRIVER_PARTS = (*DRIVER_MODULES, "verifying", "adding")


def _is_driver(name: str) -> bool:
    """Whether module `name` is part of a format's driver (`formats/<name>/layout.py`, ...)."""
    parts = name.split(".")
    return len(parts) == 4 and parts[1] == "formats" and parts[3] in DRIVER_PARTS


def test_only_the_drivers_test_which_format_a_plan_has() -> None:
    """A volume's output format is its `layout` and its driver (`formats/<name>/`): other
    modules ask them, never which format it is."""
    found = [
        f"{name}:{number}: {line.strip()}"
        for name, path in MODULES.items()
        if not _is_driver(name)
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if FORMAT_TESTS.search(line)
    ]
    assert not found, found


def test_each_format_is_its_folder_with_its_driver() -> None:
    """Adding a format is its folder and its member of `OutputFormat`: every member has a
    folder holding the three driver modules, and `planning/formats.py` finds its driver by
    the name alone (it imports none)."""
    for member in OutputFormat:
        folder = SRC / "formats" / member.value
        found = sorted(p.stem for p in folder.glob("*.py") if p.stem in DRIVER_MODULES)
        assert found == sorted(DRIVER_MODULES), member
    registry = _imports("shardwright.planning.formats", SRC / "planning" / "formats.py",
                        type_checking=False)  # fmt: skip
    assert not [m for m, _, _ in registry if m.startswith("shardwright.formats.")], registry


def test_the_format_test_pattern_finds_format_tests() -> None:
    caught = [
        "if plan.format == 'zarr3':",
        "assert isinstance(layout, Zarr3Layout)",
        "x = 1 if plan.info is not None else 2",
        "if plan.layout.format in names:",
        'if manifest.format == "zarr3":',
        "if options.format != OutputFormat.PRECOMPUTED:",
        'in_unit = d["format"] == "zarr3"',
    ]
    assert all(FORMAT_TESTS.search(line) for line in caught)
    assert not FORMAT_TESTS.search("if options.format != written:")  # against a kind's own
    assert not FORMAT_TESTS.search('if driver == "zarr3":')  # a TensorStore source's driver


def test_the_codecs_import_nothing_of_the_formats() -> None:
    """The formats build on the codecs (a zarr3 codec chain, a precomputed `data_encoding`);
    the codecs never reach back into `formats/` (at any depth, `TYPE_CHECKING` included), so
    the two packages cannot form a loop again. Names both share live in `common/vocabulary.py`."""
    reaches = _imports_of("shardwright.formats", lambda name: _within(name, "shardwright.codecs"))
    assert not reaches, "\n".join(reaches)


def test_only_the_command_line_imports_the_command_line() -> None:
    """`cli/` is a front end: the API, the jobs and the rest never import it (its package
    runs the whole command line when imported, which would loop back into them)."""
    reaches = _imports_of(
        "shardwright.cli",
        lambda name: not _within(name, "shardwright.cli") and name != "shardwright.__main__",
    )
    assert not reaches, "\n".join(reaches)


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _imports_of(target: str, importers: Callable[[str], bool]) -> list[str]:
    """Where the modules `importers` picks import `target` or anything in it (at any depth,
    `TYPE_CHECKING` included), as "module:line imports what"."""
    parent, _, last = target.rpartition(".")
    return [
        f"{name}:{line} imports {module}{'.' + member if member else ''}"
        for name, path in MODULES.items()
        if importers(name)
        for module, member, line in _imports(name, path, type_checking=True)
        if _within(module, target) or (module == parent and member == last)
    ]


def test_the_vocabulary_depends_on_nothing_of_the_project() -> None:
    """`common/vocabulary.py` sits below the codecs, the formats and the options: it imports none of
    the project's modules, so any of them may use it without a loop."""
    path = SRC / "common" / "vocabulary.py"
    assert _imports("shardwright.common.vocabulary", path, type_checking=True) == []


def test_the_errors_module_depends_on_nothing_of_the_project() -> None:
    """Every module may raise the project's errors; `errors.py` imports none of them (at any
    depth: function-level imports count), so no error drags a module in."""
    assert _imports("shardwright.errors", SRC / "errors.py") == []


def test_the_package_root_holds_the_public_faces_only() -> None:
    """The root holds what a user imports (the API, the two formats, the options, the errors,
    the version); everything else lives in the package of the layer it belongs to."""
    root = {path.stem for path in SRC.glob("*.py")}
    assert root == {
        "__init__",
        "__main__",
        "api",
        "errors",
        "precomputed",
        "version",
        "zarr3",
    }
    # the options, a package of their groups whose `__init__` is the public face
    assert (SRC / "options" / "__init__.py").is_file()


def test_the_shared_modules_import_nothing_above_them() -> None:
    """`common/` is below every layer: its modules import one another and the errors only."""
    reaches = [
        f"{name}:{line} imports {module}"
        for name, path in MODULES.items()
        if _within(name, "shardwright.common")
        for module, _, line in _imports(name, path, type_checking=True)
        if not _within(module, "shardwright.common") and module != "shardwright.errors"
    ]
    assert not reaches, "\n".join(reaches)


def test_the_formats_bytes_import_only_the_codecs_and_what_lies_below() -> None:
    """A format's bytes are pure (no Dask, no I/O): they import the codecs, `common/`, the
    errors, the version and bytes of `formats/`, never a driver (which sits above the planner
    and the engines), and neither format's bytes import the other's."""
    below = ("shardwright.codecs", "shardwright.common", "shardwright.formats")
    reaches = [
        f"{name}:{line} imports {module}{'.' + member if member else ''}"
        for name, path in MODULES.items()
        if _within(name, "shardwright.formats") and not _is_driver(name)
        for module, member, line in _imports(name, path, type_checking=True)
        if not any(_within(module, b) for b in below)
        and module not in ("shardwright.errors", "shardwright.version")
        or _is_driver(module)
        or member in DRIVER_PARTS
    ]
    for one, other in (("precomputed", "zarr3"), ("zarr3", "precomputed")):
        reaches += _imports_of(
            f"shardwright.formats.{other}",
            lambda name, one=one: (
                _within(name, f"shardwright.formats.{one}") and not _is_driver(name)
            ),
        )
    assert not reaches, "\n".join(reaches)

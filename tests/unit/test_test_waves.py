"""hack/test_waves.py's NEEDS against the files it describes: every file hack/test.sh runs in
the second run's waves (its LATER list) lists at least the binaries it starts, as read from its
source (no import, no lab): the operator names given to ``operators_running`` and to
``operators-up``, ``OPERATORS["name"]`` looked up, Helm (``helm_binary``, ``helm_template``,
``chart`` of tests/install_support.py) and kueuectl (``kueuectl_binary``); the same in the
fixtures it imports from other test modules (e.g. test_appwrapper.py's ``aw_operator``). What a
fixture computes (test_multikueue.py's ``sites``, ``ops.built()``) is not read: those entries
are checked by hand (see NEEDS' comment). The same reading finds that no FIRST_E2E file (the
first run, while those binaries build) starts one."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "hack"))
import operators as ops  # noqa: E402
import test_waves as waves  # noqa: E402

HELM_CALLS = {"helm_binary", "helm_template", "chart"}


def _test_sh_list(name: str) -> list[str]:
    """The words of hack/test.sh's ``NAME=(...)`` (or ``NAME+=(...)``) at a line's start."""
    script = (ROOT / "hack" / "test.sh").read_text()
    m = re.search(rf"^{re.escape(name)}\(([^)]*)\)", script, re.M)
    assert m, f"hack/test.sh's {name} not found"
    return m.group(1).split()


def first_e2e() -> list[str]:
    """hack/test.sh's FIRST_E2E: the e2e files of the first run (the binaries being built)."""
    return _test_sh_list("FIRST_E2E=")


def later_files() -> list[str]:
    """hack/test.sh's LATER: the e2e files not in FIRST_E2E, then the three it adds."""
    first = first_e2e()
    e2e = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "tests" / "e2e").glob("test_*.py"))
    return [f for f in e2e if f not in first] + _test_sh_list("LATER+=")


def _strings(node: ast.AST, consts: dict[str, ast.AST]) -> set[str]:
    """The string constants ``node`` names: a string, a list or tuple of them, ``*NAME`` or
    ``NAME`` of a module-level list or tuple."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.List, ast.Tuple)):
        return set().union(*(_strings(e, consts) for e in node.elts))
    if isinstance(node, ast.Starred):
        return _strings(node.value, consts)
    if isinstance(node, ast.Name) and node.id in consts:
        return _strings(consts[node.id], consts)
    return set()


def _callee(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def _started(node: ast.AST, consts: dict[str, ast.AST]) -> set[str]:
    """The binaries the code under ``node`` starts (see the module doc)."""
    names: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            callee = _callee(n)
            if callee == "operators_running":
                names |= set().union(*(_strings(a, consts) for a in n.args[1:]))
            elif callee in ("lab_cmd", "lab") and n.args and _strings(n.args[0], {}) == {
                    "operators-up"}:
                names |= set().union(*(_strings(a, consts) for a in n.args[1:]))
            elif callee in HELM_CALLS:
                names.add("helm")
            elif callee == "kueuectl_binary":
                names.add("kueuectl")
        elif isinstance(n, ast.Subscript) and isinstance(n.value, ast.Attribute) \
                and n.value.attr == "OPERATORS":
            names |= _strings(n.slice, {})
    return names & set(waves.BUILD_ORDER)


class _Module:
    def __init__(self, path: Path) -> None:
        self.tree = ast.parse(path.read_text())
        self.consts = {t.id: s.value for s in self.tree.body if isinstance(s, ast.Assign)
                       for t in s.targets if isinstance(t, ast.Name)}
        self.fixtures = {s.name: s for s in self.tree.body if isinstance(s, ast.FunctionDef)
                         and any("fixture" in ast.unparse(d) for d in s.decorator_list)}

    def fixture_started(self, name: str, seen: set[str]) -> set[str]:
        """What fixture ``name`` of this module starts, with the fixtures of this module it
        takes."""
        if name in seen or name not in self.fixtures:
            return set()
        seen.add(name)
        fn = self.fixtures[name]
        out = _started(fn, self.consts)
        for arg in fn.args.args:
            out |= self.fixture_started(arg.arg, seen)
        return out


def started_by(rel: str) -> set[str]:
    """What the file ``rel`` starts, with the fixtures it imports from other test modules."""
    mod = _Module(ROOT / rel)
    out = _started(mod.tree, mod.consts)
    for s in mod.tree.body:
        if isinstance(s, ast.ImportFrom) and (s.module or "").startswith("tests.") \
                and s.module not in ("tests.install_support", "tests.labfixture"):
            path = ROOT / (s.module.replace(".", "/") + ".py")
            if path.is_file():
                other = _Module(path)
                for alias in s.names:
                    out |= other.fixture_started(alias.name, set())
    return out


def test_the_binaries_are_the_ones_built() -> None:
    assert set(waves.OPERATORS) == set(ops.OPERATORS)
    assert sorted(waves.BUILD_ORDER) == sorted([*waves.OPERATORS, "helm", "kueuectl"])
    for f, need in waves.NEEDS.items():
        assert need <= set(waves.BUILD_ORDER), (f, need)


def test_every_file_in_needs_is_a_later_file() -> None:
    """No entry left for a file gone or moved to FIRST_E2E; a LATER file without an entry is
    allowed (it runs after every build)."""
    assert set(waves.NEEDS) <= set(later_files())


@pytest.mark.parametrize("rel", later_files())
def test_a_later_files_entry_lists_what_it_starts(rel: str) -> None:
    started = started_by(rel)
    assert started <= waves.needs(rel), (
        f"{rel} starts {sorted(started - waves.needs(rel))} not in its NEEDS entry "
        "(hack/test_waves.py): a wave could run it before they are built")


@pytest.mark.parametrize("rel", first_e2e())
def test_a_first_run_file_starts_no_binary_being_built(rel: str) -> None:
    """The first run goes while the operators, Helm and kueuectl build: a FIRST_E2E file that
    starts one would fail there (tests/conftest.py), or pass only when the build won the race."""
    assert (ROOT / rel).is_file(), f"{rel} in FIRST_E2E does not exist"
    assert not started_by(rel), (
        f"{rel} starts {sorted(started_by(rel))}: move it from FIRST_E2E (hack/test.sh) to the "
        "waves, with a NEEDS entry in hack/test_waves.py")


def test_a_file_not_listed_waits_for_every_build() -> None:
    assert waves.needs("tests/e2e/test_new.py") == frozenset(waves.BUILD_ORDER)
    files = ["tests/e2e/test_new.py", "tests/e2e/test_ray.py", "tests/e2e/test_kubeflow.py"]
    assert waves.ready(files, ["kuberay", "jobset"]) == ["tests/e2e/test_ray.py"]
    assert waves.ready(files, waves.BUILD_ORDER) == files


def test_the_reader_finds_what_the_files_start() -> None:
    """The parse itself: the forms the files use are read (so the check above is not empty)."""
    assert started_by("tests/e2e/test_appwrapper.py") == {"appwrapper", "jobset"}
    assert started_by("tests/e2e/test_breaker14_findings.py") == {"appwrapper", "jobset",
                                                                  "kuberay"}
    assert started_by("tests/e2e/test_breaker12_findings.py") == {"jobset", "trainer",
                                                                  "kuberay"}
    assert started_by("tests/e2e/test_trainjob.py") == {"jobset", "trainer"}
    assert started_by("tests/e2e/test_kueuectl.py") == {"kueuectl"}
    assert started_by("tests/unit/test_chart.py") == {"helm"}
    assert started_by("tests/e2e/test_sparkbreak_findings.py") == {"spark-operator"}

"""The shape of the code: the import layers hold (the report at the bottom, the Hub emulator a
package of its own, no cycles), and a backend is one registered entry."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("hfexport", "hfexport_devhub")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """Every module `path` imports, at module level or inside a function, resolved to a name."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            found.add(target)
            # `from pkg import sub` imports the module pkg.sub when there is one.
            found.update(f"{target}.{alias.name}" for alias in node.names if f"{target}.{alias.name}" in modules)
    return found


def _graph() -> dict[str, set[str]]:
    files = [p for package in PACKAGES for p in (ROOT / package).rglob("*.py")]
    modules = {_module_name(p) for p in files}
    return {_module_name(p): _imports(p, modules) for p in files}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), among the graph's own modules."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node] & graph.keys():
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph[node]:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def _is_in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_emulator_and_hfexport_stay_apart():
    graph = _graph()
    assert "hfexport_devhub.app" in graph and "hfexport.report" in graph
    for module, targets in graph.items():
        if _is_in(module, "hfexport_devhub"):
            assert not any(_is_in(t, "hfexport") for t in targets), f"{module} imports hfexport"
        elif module != "hfexport.entrypoints.demo":  # the demo runs against the emulator by design
            assert not any(_is_in(t, "hfexport_devhub") for t in targets), f"{module} imports the emulator"


def test_no_module_is_part_of_an_import_cycle():
    assert _cycles(_graph()) == []
    # The check itself finds one when there is one.
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_report_sits_at_the_bottom_and_pulls_in_no_torch():
    graph = _graph()
    assert not any(_is_in(t, "hfexport") or _is_in(t, "hfexport_devhub") for t in graph["hfexport.report"])
    # Importing it (and so the package) as a reader of reports does, loads no ML library.
    probe = (
        "import sys, hfexport.report; "
        "heavy = [m for m in ('torch', 'transformers', 'onnx', 'executorch', 'huggingface_hub') if m in sys.modules]; "
        "print(heavy)"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_worker_is_never_imported_by_the_parent_side():
    """`hfexport/worker/` loads and traces the model; only the worker process runs it."""
    graph = _graph()
    for module, targets in graph.items():
        if not _is_in(module, "hfexport.worker"):
            assert not any(_is_in(t, "hfexport.worker") for t in targets), f"{module} imports the worker"


def test_a_backend_registered_alone_shows_in_the_table_the_card_and_the_pr(hub, workspace, monkeypatch):
    """No hfexport module is edited: registering `pt2-plugin` (tests/backend_plugin.py) is enough
    for it to export, validate and publish, with its folder, tag and snippet everywhere."""
    import yaml
    from huggingface_hub import HfApi
    from rich.console import Console

    import hfexport
    from hfexport.backends import BACKENDS
    from hfexport.entrypoints import console

    import tiny_models

    # The export worker finds the backend by importing the module that registered it.
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))
    import backend_plugin  # noqa: F401  (registers the backend)

    try:
        owner, bot = hub.add_user("plugin-owner"), hub.add_user("plugin-bot")
        owner_api = HfApi(endpoint=hub.url, token=owner)
        owner_api.create_repo("plugin-owner/tiny")
        owner_api.upload_folder(
            repo_id="plugin-owner/tiny", folder_path=tiny_models.bert(workspace / "plugin-bert", seed=7)
        )
        result = hfexport.push("plugin-owner/tiny", backends="pt2-plugin", token=bot)
        assert result.action == "opened" and result.report.ok, result.report.backends[0].error

        captured = Console(record=True, width=200)
        monkeypatch.setattr(console, "err", captured)
        console.print_report(result.report)
        table = captured.export_text()
        assert "pt2-plugin" in table and "✓ ok" in table

        revision = f"refs/pr/{result.pr_num}"
        files = set(owner_api.list_repo_files("plugin-owner/tiny", revision=revision))
        assert {"plugin/pt2/model.pt2", "plugin/pt2/export.json"} <= files
        card = Path(owner_api.hf_hub_download("plugin-owner/tiny", "README.md", revision=revision)).read_text()
        assert "| pt2-plugin | `" in card and "| `plugin/pt2/` |" in card
        assert 'plugin_runtime.load(hf_hub_download(repo, "plugin/pt2/model.pt2", revision=revision))' in card
        assert 'repo, revision = "plugin-owner/tiny", "main"' in card
        assert "plugin-format" in yaml.safe_load(card.split("---\n")[1])["tags"]
    finally:
        BACKENDS.pop("pt2-plugin", None)


def test_hfexport_settings_are_read_in_settings_py_alone():
    """Every HFEXPORT_* variable is named and read in hfexport/settings.py; elsewhere its name
    appears only in texts (help, errors), never as an environment lookup."""
    lookup = re.compile(r"""(?:environ(?:\.get|\.setdefault)?\s*[\(\[]|getenv\()\s*["']HFEXPORT_""")
    offenders = [
        str(path.relative_to(ROOT))
        for package in ("hfexport", "action")
        for path in (ROOT / package).rglob("*.py")
        if path.name != "settings.py" and lookup.search(path.read_text())
    ]
    assert offenders == []


def test_every_variant_names_a_recipe_the_worker_has_and_the_parent_never_imports_it():
    import importlib

    from hfexport.variants import VARIANTS

    assert VARIANTS
    for variant in VARIANTS.values():
        module, _, function = variant.recipe.partition(":")
        assert _is_in(module, "hfexport.worker"), variant.recipe
        assert callable(getattr(importlib.import_module(module), function)), variant.recipe
    graph = _graph()
    for module, targets in graph.items():
        if not _is_in(module, "hfexport.worker"):
            assert not any(_is_in(t, "hfexport.worker") for t in targets), f"{module} imports the worker"


def test_the_readme_lists_every_exit_code_the_enum_defines():
    from hfexport.errors import ExitCode

    readme = (ROOT / "README.md").read_text()
    listed = readme[readme.index("Exit codes (`hfexport.ExitCode`):") :].split("\n\n", 1)[0]
    assert {int(code) for code in re.findall(r"`(\d+)`", listed)} == {int(c) for c in ExitCode}

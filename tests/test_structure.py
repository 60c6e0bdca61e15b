"""The shape of the code: the import layers hold (the report at the bottom, the Hub emulator a
package of its own, no cycles), and a backend is one registered entry."""

from __future__ import annotations

import ast
import json
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
    # What it imports of ours (`redact`) imports nothing of ours itself.
    below = {t for t in graph["hfexport.report"] if _is_in(t, "hfexport")}
    assert below <= {"hfexport.redact"} and not any(_is_in(t, "hfexport") for t in graph["hfexport.redact"])
    assert not any(_is_in(t, "hfexport_devhub") for t in graph["hfexport.report"])
    # Importing it (and so the package) as a reader of reports does, loads no ML library.
    probe = (
        "import sys, hfexport.report; "
        "heavy = [m for m in ('torch', 'transformers', 'onnx', 'executorch', 'huggingface_hub') if m in sys.modules]; "
        "print(heavy)"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


# docs/design.md's import layers, bottom first: a module imports its own layer's and those below.
LAYERS = (
    ("report", "redact", "errors", "settings", "logs", "table", "messages"),  # the contracts
    ("proc", "layouts", "tasks", "backends", "variants", "versions", "processors"),  # registries, helpers
    ("sandbox", "web", "card", "hub.retry"),  # isolation, the browsers' runtimes, the card's text
    ("pipeline", "hub"),  # the parent's stages, publishing
    ("worker",),  # the export process
    ("entrypoints", "__main__", ""),  # the ways in ("": the package root, which re-exports them)
)


def _layer(module: str) -> int:
    """The layer of an hfexport module: its longest prefix in `LAYERS`."""
    name = module.removeprefix("hfexport").removeprefix(".")
    found = [(len(p), i) for i, layer in enumerate(LAYERS) for p in layer if name == p or name.startswith(p + ".")]
    found += [(0, len(LAYERS) - 1)] if name == "" else []
    assert found, f"{module} is in no layer of LAYERS: place it there and in docs/design.md"
    return max(found)[1]


def test_each_module_imports_only_its_own_layer_and_those_below():
    graph = _graph()
    upward = [
        f"{module} (layer {_layer(module) + 1}) imports {target} (layer {_layer(target) + 1})"
        for module, targets in graph.items()
        if _is_in(module, "hfexport")
        for target in targets
        if _is_in(target, "hfexport") and target in graph and _layer(target) > _layer(module)
    ]
    assert upward == []
    # The check sees one: the report importing the worker.
    assert _layer("hfexport.worker.job") > _layer("hfexport.report")


_HEAVY = ("torch", "transformers", "huggingface_hub", "numpy", "starlette", "uvicorn", "onnx", "onnxruntime")


def _heavy_after_import(module: str) -> list[str]:
    probe = f"import sys, {module}; print([m for m in {_HEAVY!r} if m in sys.modules])"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return ast.literal_eval(result.stdout.strip())


def test_the_cli_and_the_api_start_without_any_heavy_library():
    """`hfexport --help`, `doctor` and the Python API's import load no ML library, no Hub client and
    no web server: each is imported where it is used (the worker, `push`, `serve`)."""
    assert _heavy_after_import("hfexport.entrypoints.cli") == []
    assert _heavy_after_import("hfexport.entrypoints.api") == []
    # The probe sees one: the browsers' wasm runtime uses numpy.
    assert "numpy" in _heavy_after_import("hfexport.web.wasm")


def _imports_in_functions() -> list[tuple[Path, ast.FunctionDef | ast.AsyncFunctionDef, ast.ImportFrom]]:
    """Every import of an hfexport module made inside a function, with its function."""
    found = []
    for path in sorted((ROOT / "hfexport").rglob("*.py")):
        for function in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found += [
                    (path, function, node)
                    for node in ast.walk(function)
                    if isinstance(node, ast.ImportFrom)
                    and (node.level or (node.module or "").startswith(("hfexport.", "hfexport_devhub")))
                ]
    return found


def test_our_modules_are_imported_at_the_top_and_each_exception_says_why():
    """One import rule: hfexport's own modules at the top of the module (heavy libraries are
    imported where they are used instead). A function that imports one says why on that line or
    the line above (`# here:` / `# after:`), and there are few."""
    found = _imports_in_functions()
    assert len(found) <= 20, [f"{p.relative_to(ROOT)}:{n.lineno}" for p, _, n in found]
    unexplained = []
    for path, function, node in found:
        lines = path.read_text().splitlines()
        first = min(n.lineno for p, f, n in found if p == path and f is function)
        said = " ".join(lines[first - 2 : first]) + lines[node.lineno - 1]
        if "# here:" not in said and "# after:" not in said:
            unexplained.append(f"{path.relative_to(ROOT)}:{node.lineno} in {function.name}")
    assert unexplained == []


def test_the_worker_is_never_imported_by_the_parent_side():
    """`hfexport/worker/` loads and traces the model; only the worker process runs it."""
    graph = _graph()
    for module, targets in graph.items():
        if not _is_in(module, "hfexport.worker"):
            assert not any(_is_in(t, "hfexport.worker") for t in targets), f"{module} imports the worker"


def test_a_backend_registered_alone_shows_in_the_table_the_card_and_the_pr(hub, workspace, monkeypatch):
    """No hfexport module is edited: registering `pt2-plugin` (tests/backend_plugin.py) is enough
    for it to export, validate and publish, with its folder, tag and snippet everywhere."""
    import tiny_models
    import yaml
    from huggingface_hub import HfApi
    from rich.console import Console

    import hfexport
    from hfexport.backends import BACKENDS
    from hfexport.entrypoints import console

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

    from hfexport.backends import get_backend
    from hfexport.variants import VARIANTS

    assert VARIANTS
    for variant in VARIANTS.values():
        if variant.recipe is None:  # built by its backend's own job, which the worker has
            runner = get_backend(variant.backend).llm_runner
            assert runner is not None and _is_in(runner.partition(":")[0], "hfexport.worker"), variant
            continue
        module, _, function = variant.recipe.partition(":")
        assert _is_in(module, "hfexport.worker"), variant.recipe
        assert callable(getattr(importlib.import_module(module), function)), variant.recipe
    graph = _graph()
    for module, targets in graph.items():
        if not _is_in(module, "hfexport.worker"):
            assert not any(_is_in(t, "hfexport.worker") for t in targets), f"{module} imports the worker"


def test_the_docs_list_every_exit_code_the_enum_defines():
    from hfexport.errors import ExitCode

    readme = (ROOT / "docs" / "export.md").read_text()
    listed = readme[readme.index("Exit codes (`hfexport.ExitCode`):") :].split("\n\n", 1)[0]
    assert {int(code) for code in re.findall(r"`(\d+)`", listed)} == {int(c) for c in ExitCode}


# Names only `worker/splits.py` may spell as strings: the generation components, and the
# modalities (which `pipeline/plan.py`, naming the split, reads too).
_COMPONENTS = {"decode", "prefill", "encoder", "vision_encoder", "embed_tokens"}
_MODALITIES = {"text", "vision", "audio", "text-vision", "image-text"}


def _compared_strings(node: ast.Compare) -> set[str]:
    found = set()
    for side in [node.left, *node.comparators]:
        items = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
        found.update(i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str))
    return found


def test_only_splits_py_knows_component_names_and_only_it_and_the_plan_compare_modalities():
    """A component's name is written in `worker/splits.py` alone (no `"decode"` anywhere else, not
    even as a key); a modality is compared there and in the plan, which chooses the split."""
    offenders = []
    for path in (ROOT / "hfexport").rglob("*.py"):
        where = str(path.relative_to(ROOT))
        if where == "hfexport/worker/splits.py":
            continue
        tree = ast.parse(path.read_text())
        docstrings = {
            id(n.body[0].value)
            for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and n.body
            and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in _COMPONENTS and id(node) not in docstrings:
                offenders.append(f"{where}:{node.lineno} names component {node.value!r}")
            if isinstance(node, ast.Compare) and where != "hfexport/pipeline/plan.py":
                offenders += [
                    f"{where}:{node.lineno} compares modality {s!r}" for s in _compared_strings(node) & _MODALITIES
                ]
    assert offenders == []


# A toy split: a text encoder exported as two graphs, its token embeddings and the rest, chained.
_TOY_SPLIT = """

@register_split("toy-two-stage")
class ToyTwoStage(ExportSplit):
    components = ("embed", "body")
    generates = False

    def prepare(self, model) -> None:
        model.config.use_cache = False

    def pads_left(self) -> bool:
        return False

    def export(self, x: Exporting, model, sample: dict):
        from transformers.exporters import ExportedModel

        ids, mask = {"input_ids": sample["input_ids"]}, sample["attention_mask"]
        axes = x.dynamic_shapes({"attention_mask": mask})["attention_mask"]  # batch and sequence, shared
        body = {"inputs_embeds": model.get_input_embeddings()(ids["input_ids"]), "attention_mask": mask}
        graphs = {
            "embed": x.one(TokenEmbeddings(model), ids, x.config(ids)),
            "body": x.one(model, body, x.backend.make_config({"inputs_embeds": axes, "attention_mask": axes})),
        }
        return ExportedModel(graphs, x.exporter.export_format, config=model.config)

    def validate(self, model, loaded, traced, sample, other):
        from .validate import compare_forward

        def chained(**inputs):
            embeds = one_tensor(loaded.runners["embed"](input_ids=inputs["input_ids"]))
            return loaded.runners["body"](inputs_embeds=embeds, attention_mask=inputs["attention_mask"])

        checks = (("sample", sample), ("other_shape", other))
        return [compare_forward(name, model, chained, inputs) for name, inputs in checks]
"""

_TOY_RUN = """
import json, sys
import hfexport, hfexport.pipeline.plan as planning

assert hfexport.__file__.startswith(sys.argv[3]), hfexport.__file__
make_plan = planning.make_plan

def named(*args, **kwargs):  # the plan naming the toy split, as it names the others
    plan = make_plan(*args, **kwargs)
    plan.split = "toy-two-stage"
    return plan

planning.make_plan = named
report = hfexport.export(sys.argv[1], sys.argv[2], backends="onnx,dynamo")
print(json.dumps(report.to_dict()))
"""


def test_a_split_registered_in_splits_py_alone_is_exported_validated_and_laid_out(tmp_path):
    """A copy of hfexport whose only change is one class appended to `worker/splits.py`: the
    worker exports its two components, validates them chained on another shape, and the ONNX
    layout writes each as a self-contained graph that ONNX Runtime runs alone."""
    import shutil

    import numpy as np
    import onnxruntime as ort
    import tiny_models
    import torch
    from transformers import BertModel

    copy = tmp_path / "copy"
    shutil.copytree(ROOT / "hfexport", copy / "hfexport", ignore=shutil.ignore_patterns("__pycache__"))
    splits = copy / "hfexport" / "worker" / "splits.py"
    splits.write_text(splits.read_text() + _TOY_SPLIT)
    changed = [
        str(p.relative_to(copy))
        for p in (copy / "hfexport").rglob("*.py")
        if p.read_bytes() != (ROOT / p.relative_to(copy)).read_bytes()
    ]
    assert changed == ["hfexport/worker/splits.py"]

    folder = tiny_models.bert(tmp_path / "bert", seed=3)
    out = tmp_path / "out"
    env = {**__import__("os").environ, "PYTHONPATH": str(copy)}
    run = subprocess.run(
        [sys.executable, "-c", _TOY_RUN, str(folder), str(out), str(copy)],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["plan"]["split"] == "toy-two-stage"
    for b in report["backends"]:
        assert b["status"] == "ok", (b["backend"], b["error"], b.get("log_tail"))
        assert b["components"] == ["embed", "body"] and b["inputs"]["embed"] == ["input_ids"], b
        checks = {c["name"]: c for c in b["validation"]["checks"]}
        assert set(checks) == {"sample", "other_shape"} and all(c["error"] is None for c in checks.values())
    onnx = next(b for b in report["backends"] if b["backend"] == "onnx")
    assert onnx["layout"] == "transformers.exporters"
    # Laid out: each graph alone in a plain ONNX Runtime session, chained, matches eager.
    embed = ort.InferenceSession(str(out / "onnx" / "embed.onnx"), providers=["CPUExecutionProvider"])
    body = ort.InferenceSession(str(out / "onnx" / "body.onnx"), providers=["CPUExecutionProvider"])
    ids = torch.randint(5, 90, (3, 11))
    mask = torch.ones_like(ids)
    embeds = embed.run(None, {"input_ids": ids.numpy()})[0]
    names = [i.name for i in body.get_inputs()]
    got = body.run(
        None, dict(zip(names, [embeds, mask.numpy()] if names[0] == "inputs_embeds" else [mask.numpy(), embeds]))
    )[0]
    with torch.inference_mode():
        want = BertModel.from_pretrained(folder).eval()(input_ids=ids, attention_mask=mask).last_hidden_state
    assert np.abs(got - want.numpy()).max() < 1e-4

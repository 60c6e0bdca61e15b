"""hfexport/backends.py on its own: the registry and the backend list a user passes."""

from __future__ import annotations

import dataclasses

import pytest

from hfexport.backends import BACKENDS, DEFAULT_BACKENDS, export_folders, get_backend, offered_backends, parse_backends
from hfexport.errors import UnknownBackendError


def test_the_default_is_the_three_cpu_backends_in_order():
    assert parse_backends(None) == list(DEFAULT_BACKENDS) == ["dynamo", "onnx", "executorch"]


def test_a_repo_named_for_one_format_gets_that_format_alone_by_default():
    """`push --into me/model-ONNX` without --backends: ONNX alone; a name of no format: all three;
    a list given is kept whatever the name."""
    assert parse_backends(None, "me/model-ONNX") == ["onnx"]
    assert parse_backends(None, "me/model-executorch") == ["executorch"]
    assert parse_backends(None, "me/model-copy") == parse_backends(None, "me/onnx-model") == list(DEFAULT_BACKENDS)
    assert parse_backends("dynamo,onnx", "me/model-ONNX") == ["dynamo", "onnx"]


def test_names_are_trimmed_deduplicated_and_kept_in_order():
    assert parse_backends(" onnx, dynamo ,onnx,,") == ["onnx", "dynamo"]
    assert parse_backends(["executorch", "onnx"]) == ["executorch", "onnx"]


@pytest.mark.parametrize("spec", ["", " , ", [], "onnx,tensorrt"])
def test_an_empty_or_unknown_list_is_bad_input_naming_what_exists(spec):
    with pytest.raises(UnknownBackendError) as raised:
        parse_backends(spec)
    assert "dynamo" in raised.value.fix and "onnx" in raised.value.fix


def test_every_backend_has_a_folder_of_its_own_and_tags():
    folders = [b.subfolder for b in BACKENDS.values()]
    assert len(folders) == len(set(folders))
    for name, backend in BACKENDS.items():
        assert get_backend(name) is backend and backend.tags
    assert {"dynamo", "onnx", "executorch"} <= set(export_folders())
    assert set(DEFAULT_BACKENDS) <= set(offered_backends())


def test_the_packages_checked_before_a_worker_starts_cover_what_each_exporter_requires():
    """The parent checks `Backend.packages` cheaply (no torch import) to skip a backend cleanly;
    the exporter class's own `required_packages` is the source, read here so the two cannot drift."""
    from transformers.exporters.auto import get_exporter_class

    for backend in BACKENDS.values():
        required = set(get_exporter_class(backend.export_format).required_packages) - {"torch"}
        assert required <= set(backend.packages), (backend.name, required - set(backend.packages))


@pytest.mark.parametrize("stored", ["float32", "bfloat16", "float16"])
def test_a_checkpoint_is_exported_as_stored_where_the_runtime_serves_it_else_in_float32_with_why(stored):
    assert get_backend("dynamo").precision(stored) == (stored, None)  # a `.pt2` runs any dtype
    for name in ("onnx", "executorch"):
        dtype, why = get_backend(name).precision(stored)
        assert dtype == "float32" and (why is None) == (stored == "float32"), (name, why)
    assert "model.onnx" in get_backend("onnx").precision("bfloat16")[1]


def test_a_toy_backend_added_through_the_registry_alone_is_planned_costed_and_cached(tmp_path, monkeypatch):
    """Adding a backend is one decorated function: the planner, preflight's cost and the export
    cache's key read it from the registry, with no other module edited."""
    import tiny_models

    from hfexport.backends import UNMEASURED, Cost, register_backend
    from hfexport.pipeline import cache
    from hfexport.pipeline.plan import make_plan
    from hfexport.pipeline.preflight import Weights, estimate

    monkeypatch.setitem(BACKENDS, "toy", BACKENDS["dynamo"])  # restored after the test, whatever happens
    toy_cost = Cost(base_memory=1e9, memory_per_weight_byte=2.0, disk_per_weight_byte=0.5)

    @register_backend("toy", export_format="dynamo", subfolder="toy", tags=("toy",), packages=("numpy",), cost=toy_cost)
    def _toy(dynamic_shapes):
        raise AssertionError("not exported here")

    plan = make_plan(tiny_models.bert(tmp_path / "bert"), ["onnx", "toy"])
    assert plan.backends == ["onnx", "toy"] and plan.backend_digest("toy") != plan.backend_digest("onnx")

    weights = Weights(parameters=100_000_000, stored_bytes=400_000_000, dtypes=("F32",))
    (toy,) = estimate(weights, ["toy"])
    assert (toy.memory_bytes, toy.disk_bytes) == (toy_cost.memory(400_000_000), toy_cost.disk(400_000_000))
    # A backend never measured is costed as the dearest measured, never silently as another one.
    monkeypatch.setitem(BACKENDS, "toy", dataclasses.replace(BACKENDS["toy"], cost=None))
    (unmeasured,) = estimate(weights, ["toy"])
    assert unmeasured.memory_bytes == UNMEASURED.memory(400_000_000) > estimate(weights, ["onnx"])[0].memory_bytes

    # Its package's version is part of every cached export's key: another numpy, another export.
    assert "numpy" in cache._keyed_runtimes()

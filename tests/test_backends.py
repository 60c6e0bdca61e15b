"""hfexport/backends.py on its own: the registry and the backend list a user passes."""

from __future__ import annotations

import pytest

from hfexport.backends import BACKENDS, DEFAULT_BACKENDS, export_folders, get_backend, offered_backends, parse_backends
from hfexport.errors import UnknownBackendError


def test_the_default_is_the_three_cpu_backends_in_order():
    assert parse_backends(None) == list(DEFAULT_BACKENDS) == ["dynamo", "onnx", "executorch"]


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

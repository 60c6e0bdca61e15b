"""hfexport/layouts.py on its own: a decoder graph renamed as optimum and transformers.js read a
decoder with past, and a graph written as they download it, on a small graph built here (no export)."""

from __future__ import annotations

import shutil

import onnx
import onnx_ir
from onnx import TensorProto, helper

from hfexport.layouts import as_decoder_with_past, write_onnx


def _decoder(extra_input: bool = False, sliding: bool = False) -> onnx_ir.Model:
    """What the exporter leaves: its own cache names, head axes as symbols named by their size."""
    f, i = TensorProto.FLOAT, TensorProto.INT64
    cache = ["s0", "2", "s1", "8"]
    inputs = [
        helper.make_tensor_value_info("input_ids", i, ["s0", "s2"]),
        helper.make_tensor_value_info("attention_mask", i, ["s0", "s3"]),
        helper.make_tensor_value_info("input.cache.layers.0.keys", f, cache),
        helper.make_tensor_value_info("input.cache.layers.0.values", f, cache),
    ]
    if extra_input or sliding:  # a sliding layer's fill level
        inputs.append(helper.make_tensor_value_info("input.cache.layers.0._sliding_window_tensor", i, []))
    present = ["s0", "2", "s1 + s2", "8"]
    outputs = [
        helper.make_tensor_value_info("logits", f, ["s0", "s2", 16]),
        helper.make_tensor_value_info("output.cache.layers.0.keys", f, present),
        helper.make_tensor_value_info("output.cache.layers.0.values", f, present),
    ]
    nodes = [
        helper.make_node("Cast", ["input_ids"], ["ids_f"], to=f),
        helper.make_node("Expand", ["ids_f", "shape"], ["logits"]),
        helper.make_node("Identity", ["input.cache.layers.0.keys"], ["output.cache.layers.0.keys"]),
        helper.make_node("Identity", ["input.cache.layers.0.values"], ["output.cache.layers.0.values"]),
    ]
    if sliding:  # traced as a full layer: the graph only hands the fill level back
        outputs.append(helper.make_tensor_value_info("output.cache.layers.0._sliding_window_tensor", i, []))
        nodes.append(
            helper.make_node(
                "Identity",
                ["input.cache.layers.0._sliding_window_tensor"],
                ["output.cache.layers.0._sliding_window_tensor"],
            )
        )
    if extra_input:  # ... and here reads it: the graph needs it
        nodes[1] = helper.make_node("Expand", ["ids_f", "shape"], ["expanded"])
        nodes += [
            helper.make_node("Cast", ["input.cache.layers.0._sliding_window_tensor"], ["fill"], to=f),
            helper.make_node("Add", ["expanded", "fill"], ["logits"]),
        ]
    shape = helper.make_tensor("shape", i, [3], [1, 1, 16])
    graph = helper.make_graph(nodes, "decode", inputs, outputs, initializer=[shape])
    return onnx_ir.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def test_a_decoder_is_renamed_as_the_loaders_read_it():
    model = _decoder()
    assert as_decoder_with_past(model)
    inputs = {v.name: [d if isinstance(d, int) else d.value for d in v.shape] for v in model.graph.inputs}
    outputs = {v.name: [d if isinstance(d, int) else d.value for d in v.shape] for v in model.graph.outputs}
    assert inputs == {
        "input_ids": ["batch_size", "sequence_length"],
        "attention_mask": ["batch_size", "total_sequence_length"],
        "past_key_values.0.key": ["batch_size", 2, "past_sequence_length", 8],
        "past_key_values.0.value": ["batch_size", 2, "past_sequence_length", 8],
    }
    assert outputs["present.0.key"] == ["batch_size", 2, "past_sequence_length + sequence_length", 8]
    assert outputs["logits"] == ["batch_size", "sequence_length", 16]
    onnx.checker.check_model(onnx_ir.to_proto(model))


def test_a_graph_with_more_cache_state_is_left_as_it_is():
    model = _decoder(extra_input=True)
    before = onnx_ir.to_proto(model).SerializeToString()
    assert not as_decoder_with_past(model)
    assert onnx_ir.to_proto(model).SerializeToString() == before


def test_a_sliding_layers_fill_level_the_graph_only_hands_back_is_dropped():
    """Traced as a full layer (the mask applies the window), the graph reads a sliding layer's fill
    level only to return it: optimum and transformers.js feed no such tensor, so it goes."""
    model = _decoder(sliding=True)
    assert as_decoder_with_past(model)
    assert [v.name for v in model.graph.inputs] == [
        "input_ids",
        "attention_mask",
        "past_key_values.0.key",
        "past_key_values.0.value",
    ]
    assert [v.name for v in model.graph.outputs] == ["logits", "present.0.key", "present.0.value"]
    onnx.checker.check_model(onnx_ir.to_proto(model))


def test_a_published_graph_keeps_no_exporter_debug_records(tmp_path):
    """torch.onnx writes each node's FX node, stack trace and module scope into the graph (~1.4 kB a
    node); `write_onnx` leaves those out of what is published and keeps any other record."""
    model = _decoder()
    node = next(iter(model.graph))
    node.metadata_props.update(
        {
            "namespace": "model/layers.0",
            "pkg.torch.onnx.stack_trace": 'File "modeling_llama.py", line 1',
            "pkg.torch.onnx.fx_node": "%cast = call_function[...]",
            "owner.note": "kept",
        }
    )
    (written,) = write_onnx(model, tmp_path, "model.onnx")
    records = {p.key: p.value for n in onnx.load(str(written)).graph.node for p in n.metadata_props}
    assert records == {"owner.note": "kept"}, records


def test_a_published_graph_declares_the_shapes_of_its_inputs_and_outputs_only(tmp_path):
    """The shapes onnxscript recorded inside the graph are left out of what is published (ONNX Runtime,
    given them, fuses a kernel that runs slower: `layouts._drop_intermediate_shapes`); the graph's
    own inputs and outputs keep theirs, and the graph computes what it did."""
    import numpy as np
    import onnxruntime as ort

    model = _decoder()
    for value in (n.outputs[0] for n in model.graph):
        value.dtype = onnx_ir.DataType.FLOAT
    kept = {v.name: str(v.shape) for v in [*model.graph.inputs, *model.graph.outputs]}
    (written,) = write_onnx(model, tmp_path, "model.onnx")
    proto = onnx.load(str(written))
    assert [v.name for v in proto.graph.value_info] == []
    assert {
        v.name: str(onnx_ir.serde.deserialize_value_info_proto(v, None).shape)
        for v in [*proto.graph.input, *proto.graph.output]
    } == kept
    ids = np.array([[3]])
    cache = np.zeros((1, 2, 0, 8), np.float32)
    feed = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    feed |= {"input.cache.layers.0.keys": cache, "input.cache.layers.0.values": cache}
    logits = ort.InferenceSession(str(written), providers=["CPUExecutionProvider"]).run(["logits"], feed)[0]
    assert logits.shape == (1, 1, 16) and (logits == 3.0).all()


def test_a_graph_with_its_weights_in_a_file_is_written_self_contained_a_tensor_at_a_time(tmp_path, monkeypatch):
    """The exporter's graph + `.onnx.data`, loaded lazily (weights mapped, not read), written as the
    loaders download it: one file, every weight inside with the bytes it had; past the limit,
    `model.onnx` + `model.onnx_data` instead."""
    import numpy as np

    import hfexport.layouts as layouts

    rng = np.random.default_rng(0)
    weights = {f"w{i}": rng.standard_normal((64, 32)).astype(np.float32) for i in range(3)}
    weights["half"] = rng.standard_normal((8, 8)).astype(np.float16)
    nodes = [helper.make_node("Identity", [name], [f"out_{name}"]) for name in weights]
    outputs = [
        helper.make_tensor_value_info(f"out_{n}", TensorProto.FLOAT16 if n == "half" else TensorProto.FLOAT, a.shape)
        for n, a in weights.items()
    ]
    initializers = [onnx.numpy_helper.from_array(a, name) for name, a in weights.items()]
    graph = helper.make_graph(nodes, "g", [], outputs, initializer=initializers)
    source = tmp_path / "exported"
    source.mkdir()
    onnx_ir.save(
        onnx_ir.serde.deserialize_model(helper.make_model(graph)),
        source / "model.onnx",
        external_data="model.onnx.data",
    )

    (written,) = write_onnx(onnx_ir.load(source / "model.onnx"), tmp_path, "model.onnx")
    stored = onnx.load(str(written), load_external_data=False)
    assert all(t.data_location == TensorProto.DEFAULT and not t.external_data for t in stored.graph.initializer)
    assert {t.name: onnx.numpy_helper.to_array(t).tobytes() for t in stored.graph.initializer} == {
        name: a.tobytes() for name, a in weights.items()
    }
    onnx.checker.check_model(stored)

    monkeypatch.setattr(layouts, "SELF_CONTAINED_LIMIT", 1000)
    large = tmp_path / "large"
    large.mkdir()
    files = write_onnx(onnx_ir.load(source / "model.onnx"), large, "model.onnx")
    assert [p.name for p in files] == ["model.onnx", "model.onnx_data"]
    assert (source / "model.onnx.data").exists()  # copied: the graph's own files may be read again
    reloaded = onnx.load(str(files[0]))
    assert {t.name: onnx.numpy_helper.to_array(t).tobytes() for t in reloaded.graph.initializer} == {
        name: a.tobytes() for name, a in weights.items()
    }
    # Told its files are done with (the layout's rewrite), the one weights file the graph reads
    # whole is moved under the loaders' name, not copied.
    kept = tmp_path / "kept"
    shutil.copytree(source, kept)
    inode = (kept / "model.onnx.data").stat().st_ino
    moved = tmp_path / "moved"
    moved.mkdir()
    files = write_onnx(onnx_ir.load(kept / "model.onnx"), moved, "model.onnx", consume=True)
    assert files[1].stat().st_ino == inode and not (kept / "model.onnx.data").exists()
    reloaded = onnx.load(str(files[0]))
    assert {t.name: onnx.numpy_helper.to_array(t).tobytes() for t in reloaded.graph.initializer} == {
        name: a.tobytes() for name, a in weights.items()
    }

    # A file that also holds bytes the graph no longer reads is not published: the weights are streamed.
    pruned = onnx_ir.load(source / "model.onnx")
    pruned.graph.initializers.pop("w0")
    pruned.graph.remove(next(n for n in pruned.graph if n.inputs[0].name == "w0"), safe=False)
    pruned.graph.outputs.pop(0)
    smaller = tmp_path / "smaller"
    smaller.mkdir()
    files = write_onnx(pruned, smaller, "model.onnx", consume=True)
    assert (source / "model.onnx.data").exists()
    assert files[1].stat().st_size == 2 * weights["w1"].nbytes


def test_weights_past_a_chunk_are_written_in_the_files_transformers_js_fetches_and_both_runtimes_read(
    tmp_path, monkeypatch
):
    """Past `EXTERNAL_DATA_CHUNK` bytes (2 GB; 10 kB here) the weights go in `model.onnx_data`,
    `model.onnx_data_1`, … — the names transformers.js's `use_external_data_format: N` fetches, none
    over the chunk unless one tensor is — and ONNX Runtime, and onnxruntime-web's wasm backend
    handed the chunks as a browser fetches them, compute what the graph did with its weights inline."""
    import numpy as np
    import onnxruntime as ort

    import hfexport.layouts as layouts
    from hfexport.web import wasm

    rng = np.random.default_rng(0)
    weights = [(rng.standard_normal((16, 16)) / 4).astype(np.float32) for _ in range(9)]  # 1 kB each
    wide = rng.standard_normal((16, 200)).astype(np.float32)  # 12.8 kB: past a chunk on its own
    nodes, value = [], "x"
    for i, w in enumerate(weights):
        nodes.append(helper.make_node("MatMul", [value, f"w{i}"], [f"h{i}"]))
        value = f"h{i}"
    nodes.append(helper.make_node("MatMul", [value, "wide"], ["h"]))
    nodes.append(helper.make_node("Add", ["h", "bias"], ["y"]))  # 800 bytes: stays in the graph
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 200])],
        [onnx.numpy_helper.from_array(w, f"w{i}") for i, w in enumerate(weights)]
        + [onnx.numpy_helper.from_array(wide, "wide"), onnx.numpy_helper.from_array(np.ones(200, np.float32), "bias")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    inline = tmp_path / "inline.onnx"
    onnx.save(model, inline)
    monkeypatch.setattr(layouts, "SELF_CONTAINED_LIMIT", 1000)
    monkeypatch.setattr(layouts, "EXTERNAL_DATA_CHUNK", 10_000)
    out = tmp_path / "out"
    out.mkdir()
    files = write_onnx(onnx_ir.load(inline), out, "model.onnx")
    names = [p.name for p in files]
    assert names == ["model.onnx", *layouts.data_files("model.onnx", len(names) - 1)] and len(names) >= 3, names
    assert names[1:3] == ["model.onnx_data", "model.onnx_data_1"]
    sizes = [p.stat().st_size for p in files[1:]]
    assert sum(1 for size in sizes if size > 10_000) <= 1, sizes  # the wide tensor alone, in a chunk of its own
    stored = {t.name: t.data_location for t in onnx.load(str(files[0]), load_external_data=False).graph.initializer}
    assert stored["bias"] == TensorProto.DEFAULT and stored["wide"] == TensorProto.EXTERNAL, stored
    x = rng.standard_normal((2, 16)).astype(np.float32)
    (expected,) = ort.InferenceSession(str(inline)).run(None, {"x": x})
    (got,) = ort.InferenceSession(str(files[0])).run(None, {"x": x})
    np.testing.assert_array_equal(got, expected)
    if shutil.which("node") is not None and (wasm.SERVER.parent / "node_modules").exists():
        external, _ = wasm.graph_facts(files[0])
        assert external == names[1:], external
        with wasm.WasmRuntime() as runtime:
            (on_web,) = runtime.open(files[0]).run(None, {"x": x})
        np.testing.assert_allclose(on_web, expected, rtol=1e-4, atol=1e-5)


def test_a_head_fused_as_a_transposed_read_of_its_table_is_unfused_and_computes_the_same(tmp_path):
    """The exporter's CPU fusion reads an LM head tied to its embedding table as ONNX Runtime's
    `FusedMatMul` (transB), which WebGPU has no kernel for: unfused, the head is the `Transpose` and
    `MatMul` it was, the table still stored once, the output keeps its name and ONNX Runtime gives the
    same logits. A `FusedMatMul` that scales its product is left as it is."""
    import numpy as np
    import onnxruntime as ort

    from hfexport.layouts import unfuse_transposed_weights

    rng = np.random.default_rng(0)
    table = helper.make_tensor("table", TensorProto.FLOAT, [16, 8], rng.standard_normal(128).astype(np.float32))
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["embedded"]),
        helper.make_node("FusedMatMul", ["embedded", "table"], ["logits"], "head", domain="com.microsoft", transB=1),
        helper.make_node(
            "FusedMatMul", ["embedded", "table"], ["scaled"], "scaled", domain="com.microsoft", transB=1, alpha=0.5
        ),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 3])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 3, 16]) for n in ("logits", "scaled")],
        [table],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    fused = tmp_path / "fused.onnx"
    onnx.save(helper.make_model(graph, opset_imports=opsets), fused)
    model = onnx_ir.load(fused)
    assert unfuse_transposed_weights(model) == 1
    unfused = tmp_path / "unfused.onnx"
    onnx_ir.save(model, unfused)
    proto = onnx.load(unfused)
    assert [n.op_type for n in proto.graph.node] == ["Gather", "Transpose", "MatMul", "FusedMatMul"]
    assert [o.name for o in proto.graph.output] == ["logits", "scaled"] and len(proto.graph.initializer) == 1
    ids = {"ids": np.array([[1, 5, 9]])}
    want, got = (ort.InferenceSession(str(p)).run(None, ids) for p in (fused, unfused))
    assert all(np.allclose(a, b, atol=1e-6) for a, b in zip(want, got)), (want, got)

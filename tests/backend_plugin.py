"""A backend defined outside hfexport, by registration alone (see test_structure.py): the
torch.export program again, under its own name, folder, tag and loading snippet."""

from hfexport.backends import register_backend


def _snippet(path: str, inputs: list[str] | None) -> list[str]:
    return ["import plugin_runtime", f"plugin_runtime.load({path})"]


@register_backend(
    "pt2-plugin",
    export_format="dynamo",
    subfolder="plugin/pt2",
    tags=("plugin-format",),
    snippet=_snippet,
    packages=("torch",),
    tolerance={"float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2},
)
def _config(dynamic_shapes):
    from transformers.exporters import DynamoConfig

    return DynamoConfig(dynamic=True, dynamic_shapes=dynamic_shapes)

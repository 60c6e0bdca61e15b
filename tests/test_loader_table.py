"""tests/loader_table.py on its own: how the published loader table (docs/export.md) keeps figures and when a
written table still says what a run measured (no export, no loader)."""

from __future__ import annotations

from loader_table import LoaderTable, within


def test_a_difference_is_kept_as_the_power_of_ten_it_stays_under():
    assert within(8.34e-7) == "< 1e-06" and within(1.2e-5) == "< 1e-04"
    assert within(0.0) == "0" and within(-1.2e-7) == "0"  # 1 − a cosine a rounding above 1


def test_a_row_recorded_twice_keeps_its_larger_difference():
    table = LoaderTable()
    table.record("BertModel", "feature-extraction", "`ExportedModel` (onnx)", "max abs diff", 3e-7)
    table.record("BertModel", "feature-extraction", "`ExportedModel` (onnx)", "max abs diff", 2e-6)
    assert table.lines() == ["| BertModel | feature-extraction | `ExportedModel` (onnx) | max abs diff < 1e-05 |"]


def test_a_written_table_holds_within_a_power_of_ten_and_not_past_it_nor_with_other_rows():
    written = LoaderTable()
    written.record("T5", "text2text-generation", "transformers.js", "eager's text")
    written.record("ViT", "image-classification", "`ExportedModel` (onnx)", "max abs diff", 5e-6)
    readme = written.render()
    assert written.disagreements(readme) == []

    def measured(difference: float, result: str = "eager's text") -> LoaderTable:
        table = LoaderTable()
        table.record("T5", "text2text-generation", "transformers.js", result)
        table.record("ViT", "image-classification", "`ExportedModel` (onnx)", "max abs diff", difference)
        return table

    assert measured(3e-5).disagreements(readme) == [] and measured(4e-7).disagreements(readme) == []
    (far,) = measured(2e-8).disagreements(readme)
    assert "published 1e-5, measured 1e-7" in far
    exact = measured(0.0)  # an exact 0 here, a float32 rounding on another CPU: the same figure
    assert measured(1e-7).disagreements(exact.render()) == [] and exact.disagreements(measured(5e-8).render()) == []
    assert len(measured(5e-6).disagreements(exact.render())) == 1
    assert len(measured(5e-6, result="fails").disagreements(readme)) == 2  # one row gone, one new

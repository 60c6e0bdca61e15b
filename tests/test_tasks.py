"""hfexport/tasks.py on its own: the head decides the task, from transformers' own Auto classes."""

from __future__ import annotations

import pytest

from hfexport.tasks import TASK_TABLE, TASKS, auto_classes_of, supported_tasks, task_of_head, tasks_markdown


@pytest.mark.parametrize(
    ("head", "can_generate", "task"),
    [
        ("BertForSequenceClassification", False, "text-classification"),
        ("ViTForImageClassification", False, "image-classification"),
        ("LlamaForCausalLM", True, "text-generation-with-past"),
        ("T5ForConditionalGeneration", True, "text2text-generation-with-past"),
        ("WhisperForConditionalGeneration", True, "automatic-speech-recognition-with-past"),
        ("CLIPModel", False, "zero-shot-image-classification"),
        ("BertModel", False, "feature-extraction"),
    ],
)
def test_the_head_decides_the_task(head, can_generate, task):
    assert task_of_head(head, can_generate).name == task


def test_a_head_in_no_row_has_no_task_and_a_refused_row_says_why():
    assert "AutoModelForPreTraining" in auto_classes_of("BertForPreTraining")
    assert task_of_head("BertForPreTraining", False) is None
    refused = [t for t in TASK_TABLE if not t.supported]
    assert refused and all(t.refused for t in refused)
    assert set(supported_tasks()) == {t.name for t in TASK_TABLE if t.supported} and set(supported_tasks()) <= set(
        TASKS
    )


def test_the_markdown_table_has_a_row_per_task():
    lines = tasks_markdown()
    assert lines[0].startswith("| task |") and len(lines) == 2 + len(TASK_TABLE)
    assert all(f"| `{t.name}` |" in line for t, line in zip(TASK_TABLE, lines[2:]))

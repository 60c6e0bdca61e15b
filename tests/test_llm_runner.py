"""The contract of ExecuTorch's LLM runner layout (`hfexport/worker/llm_runner.py`): what the program
tells the runner, how large its cache is, and which prompts it is judged on. The runner running
real programs from a real push is tests/test_loaders_executorch_llm.py's."""

from __future__ import annotations

import types

import torch
from transformers import GenerationConfig, LlamaConfig

from hfexport.worker import llm_runner


def _model(**config):
    config = LlamaConfig(vocab_size=300, num_hidden_layers=3, bos_token_id=5, eos_token_id=7, **config)
    return types.SimpleNamespace(config=config, generation_config=GenerationConfig(eos_token_id=[7, 8]))


def test_the_cache_holds_the_models_context_bounded():
    assert llm_runner.max_seq_len(_model(max_position_embeddings=128).config) == 128
    assert llm_runner.max_seq_len(_model(max_position_embeddings=131072).config) == llm_runner.MAX_SEQ_LEN_BOUND


def test_the_program_tells_the_runner_its_context_ids_and_that_its_cache_is_inside():
    constants = llm_runner.metadata(_model(), 256)
    # What llm_runner_helper.cpp requires (get_max_seq_len) and reads, and optimum-executorch's names.
    assert constants["get_max_seq_len"] == constants["get_max_context_len"] == 256
    assert constants["get_vocab_size"] == 300 and constants["get_n_layers"] == 3
    assert constants["get_bos_id"] == 5 and constants["get_eos_ids"] == [7, 8]  # the generation config's
    assert constants["use_kv_cache"] is True and constants["enable_dynamic_shape"] is True
    assert constants["get_max_batch_size"] == 1 and constants["get_dtype"] == 6


def test_a_left_padded_batch_is_judged_prompt_by_prompt_unpadded():
    ids = torch.tensor([[0, 0, 4, 5], [6, 7, 8, 9]])
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    rows = llm_runner.rows({"input_ids": ids, "attention_mask": mask})
    assert [r["input_ids"].tolist() for r in rows] == [[[4, 5]], [[6, 7, 8, 9]]]
    assert all(bool(r["attention_mask"].all()) for r in rows)


def test_the_runner_is_judged_on_prompts_of_another_length_than_its_trace():
    import tiny_models

    tokenizer = tiny_models.byte_level_tokenizer()
    assert all(len(tokenizer(p)["input_ids"]) != llm_runner._TRACE_LENGTH for p in llm_runner.PROMPTS)


def test_a_tokenizer_the_runner_refuses_is_told_apart_from_a_program_it_refuses():
    assert llm_runner._refused_tokenizer(RuntimeError("Failed to load tokenizer from: /x/tokenizer.json"))
    assert not llm_runner._refused_tokenizer(RuntimeError("Required metadata method get_max_seq_len not found"))


def test_the_runner_writes_a_tokens_bytes_and_drops_a_lone_unprintable_one():
    import tiny_models

    tokenizer = tiny_models.bytes_tokenizer()
    ids = tokenizer("né ✓\n", add_special_tokens=False)["input_ids"]
    assert len(ids) == len("né ✓\n".encode())  # one token a byte: "é" two, "✓" three
    # Each piece of a split character is one byte past ASCII: the runner prints none of them.
    assert llm_runner.token_bytes(tokenizer, ids) == b"n \n"
    # The start and end token write nothing; another special token mid-text its text, as the runner prints it.
    assert llm_runner.token_bytes(tokenizer, [256, *ids[:1], 256]) == b"n"
    assert llm_runner.token_bytes(tokenizer, [*ids[:1], 257, *ids[:1]]) == b"n<|pad|>n"
    merged = tiny_models.byte_level_tokenizer()  # whole words as one token: all their bytes
    words = merged("validated this file", add_special_tokens=False)["input_ids"]
    assert len(words) < 19 and llm_runner.token_bytes(merged, words) == b"validated this file"


def test_the_runner_is_judged_by_token_ids_and_passes_where_characters_are_split(tmp_path):
    """A correct program whose greedy tokens end mid-character: the runner writes those bytes, eager's
    decoded text U+FFFD. Judged by ids it passes; other ids than eager's still fail."""
    import tiny_models
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = tiny_models.llama_over_bytes(tmp_path / "model")
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    n = 12
    expected = llm_runner.runner_expectations(model, folder, n)
    assert expected is not None
    tokenizer = AutoTokenizer.from_pretrained(folder)
    decoded = [tokenizer.decode(ids, skip_special_tokens=True) for ids in expected.values()]
    assert any("\ufffd" in text for text in decoded), decoded  # the case the ids are judged for
    llm_runner.export(model, tmp_path / llm_runner.PROGRAM, 128, None, quantized=False)  # room past the 56-byte prompt

    check = llm_runner.runner_check(expected, folder, tmp_path / llm_runner.PROGRAM, n)
    assert check.error is None and check.tokens_equal is True

    first = llm_runner.PROMPTS[0]
    other = ord("Q") if expected[first][0] != ord("Q") else ord("R")  # printable: the runner writes it
    wrong = {**expected, first: [other, *expected[first][1:]]}
    check = llm_runner.runner_check(wrong, folder, tmp_path / llm_runner.PROGRAM, n)
    assert check.tokens_equal is False and "part at byte 0" in (check.error or "")

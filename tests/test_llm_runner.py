"""The contract of ExecuTorch's LLM runner layout (`hfexport/worker/llm_runner.py`): what the program
tells the runner, how large its cache is, and which prompts it is judged on. The runner running
real programs from a real push is tests/test_loaders_llm.py's."""

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

"""Runs in tests/loaders/.venv: an ecosystem loader reading a repo on a Hub (HF_ENDPOINT), called
the way its users call it. Prints what it computed as JSON on the last line.

    python load.py sentence-transformers REPO REVISION FILE '["text", ...]'   → normalized embeddings
    python load.py optimum-causal-lm REPO REVISION '[token ids]' NEW_TOKENS  → greedy new token ids
    python load.py optimum-seq2seq-lm REPO REVISION '[token ids]' NEW_TOKENS  → the greedy decoder ids
    python load.py transformers-qa REPO REVISION QUESTION CONTEXT              → eager PyTorch's answer
    python load.py optimum-sequence-classification REPO REVISION '["text", ...]' → the logits
"""

import json
import sys


def sentence_transformers(repo: str, revision: str, file: str, texts: str) -> list:
    from sentence_transformers import SentenceTransformer

    # Its ONNX backend reads `onnx/model.onnx` unless told another file of that folder.
    options = {} if file == "model.onnx" else {"model_kwargs": {"file_name": file}}
    model = SentenceTransformer(repo, revision=revision, backend="onnx", **options)
    return model.encode(json.loads(texts), normalize_embeddings=True).tolist()


def optimum_causal_lm(repo: str, revision: str, ids: str, new_tokens: str) -> list:
    import torch
    from optimum.onnxruntime import ORTModelForCausalLM

    model = ORTModelForCausalLM.from_pretrained(repo, revision=revision)
    prompt = torch.tensor([json.loads(ids)])
    out = model.generate(
        input_ids=prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=int(new_tokens), do_sample=False
    )
    return out[0, prompt.shape[1] :].tolist()


def optimum_seq2seq_lm(repo: str, revision: str, ids: str, new_tokens: str) -> list:
    import torch
    from optimum.onnxruntime import ORTModelForSeq2SeqLM

    model = ORTModelForSeq2SeqLM.from_pretrained(repo, revision=revision)
    prompt = torch.tensor([json.loads(ids)])
    out = model.generate(
        input_ids=prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=int(new_tokens), do_sample=False
    )
    return out[0].tolist()


def optimum_sequence_classification(repo: str, revision: str, texts: str) -> list:
    from optimum.onnxruntime import ORTModelForSequenceClassification
    from transformers import AutoTokenizer

    model = ORTModelForSequenceClassification.from_pretrained(repo, revision=revision)
    tokenizer = AutoTokenizer.from_pretrained(repo, revision=revision)
    return model(**tokenizer(json.loads(texts), padding=True, return_tensors="pt")).logits.tolist()


def transformers_qa(repo: str, revision: str, question: str, context: str) -> str:
    # The eager answer: transformers' own question-answering pipeline (gone from 5.x) on the repo's
    # PyTorch weights, which picks the span as transformers.js's pipeline does.
    from transformers import pipeline

    return pipeline("question-answering", model=repo, revision=revision)(question=question, context=context)["answer"]


LOADERS = {
    "transformers-qa": transformers_qa,
    "sentence-transformers": sentence_transformers,
    "optimum-causal-lm": optimum_causal_lm,
    "optimum-seq2seq-lm": optimum_seq2seq_lm,
    "optimum-sequence-classification": optimum_sequence_classification,
}

if __name__ == "__main__":
    loader, *args = sys.argv[1:]
    print(json.dumps(LOADERS[loader](*args)))

"""The worker's memory helpers (`hfexport/worker/memory.py`) on a real checkpoint as transformers maps it."""

from __future__ import annotations

import tiny_models
import torch

from hfexport.worker.memory import drop_checkpoint_pages, return_freed


def _resident_checkpoint_bytes() -> int:
    """The resident bytes of this process's mappings of `.safetensors` files (from /proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 5:  # a mapping's header line
                inside = line.rstrip().endswith(".safetensors")
            elif inside and fields[0] == "Rss:":
                total += int(fields[1]) * 1024
    return total


def test_a_checkpoints_pages_are_dropped_and_its_weights_still_read_the_same(tmp_path):
    """transformers maps a safetensors checkpoint; once its pages are dropped the process holds none
    of them, and a weight read again is the file's, unchanged."""
    from transformers import LlamaForCausalLM

    folder = tiny_models.llama(tmp_path / "model")
    model = LlamaForCausalLM.from_pretrained(folder).eval()
    with torch.no_grad():
        before = {name: p.clone() for name, p in model.named_parameters()}
    # The pinned transformers maps it (if it copied the weights instead, this helper would be moot).
    assert _resident_checkpoint_bytes() > 0
    assert drop_checkpoint_pages() > 0
    assert _resident_checkpoint_bytes() == 0
    for name, p in model.named_parameters():
        assert torch.equal(p, before[name]), name


def _resident_bytes() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))


def test_what_a_step_freed_leaves_the_resident_set_once_returned():
    """~256 MB of heap in 4 kB blocks, freed but every 64th (as a quantizer leaves a graph's copy:
    the heap cannot shrink from its top): the pages stay resident until `return_freed` hands the
    free ones back."""
    blocks = [bytearray(4096) for _ in range(65536)]
    for block in blocks:
        block[::512] = b"x" * 8  # touched: resident
    kept = blocks[::64]
    del blocks
    held = _resident_bytes()
    return_freed()
    assert held - _resident_bytes() > 128e6
    assert all(block[0] == ord("x") for block in kept)

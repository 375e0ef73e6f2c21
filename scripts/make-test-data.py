#!/usr/bin/python3
"""Makes the compact golden references in tests/data/refs from the full ones in ../shared/refs.

A fresh clone runs the test suite on these (tests/common/test_support.h: sharedFile() reads
../shared/<path> when ../shared/refs is there, else tests/data/<path>). Every golden test family
gets at least one real case; the whole folder stays under 15 MB:

  refs/hf/llama_gqa/     the refs/hf model most tests open (its golden.h5 without
                         logits_bf16_weights: model.bf16.safetensors is left out)
  refs/hf3/smollm3/      one transformers 5.x model (the smallest, with NoPE layers)
  refs/hf4/deepseek_v32/ the learned-sparse model (the indexer), its golden.h5 without the
                         indexer's intermediate q, k and per-head scores
  refs/tokenizers/       cases.txt, GPT-2's tokenizer.json (re-serialised without indentation:
                         the same JSON value) and its lines of golden.jsonl
  refs/chat/shown/       both golden files as they are
  refs/sparq/golden.h5   cases edge_ties and edge_tiny_S5, and transfer_table
  refs/methods*/         each golden file's two edge cases and its transfer_table

The HDF5 files keep the originals' groups, datasets, attributes and storage (copied with h5py,
nothing recomputed); only the members listed here are kept. Left out for size, with the tests
that skip for it (each with a line naming what it looked for): the other refs/hf and refs/hf3
models, mistral7b's tokenizer, golden.h5's stats_L3 (2.4 MB) and the larger cases of each
golden file, refs/hf4's hybrids (qwen3_next, kimi_linear). Needs python3-h5py (Debian:
apt-get install -y python3-h5py).

Usage: scripts/make-test-data.py [SHARED_REFS] (default ../shared/refs beside the checkout).
"""

import json
import os
import shutil
import sys

try:
    import h5py
except ImportError:
    sys.exit("make-test-data.py: needs h5py (apt-get install -y python3-h5py, then run it with "
             "/usr/bin/python3)")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "refs")
LIMIT = 15 * 1024 * 1024  # bytes, the whole of tests/data (15M as du -sh counts)

# Files copied byte for byte.
COPIED = [
    "hf/llama_gqa/config.json",
    "hf/llama_gqa/generation_config.json",
    "hf/llama_gqa/model.safetensors",
    "hf3/smollm3/config.json",
    "hf3/smollm3/generation_config.json",
    "hf3/smollm3/model.safetensors",
    "hf3/smollm3/golden.h5",
    "hf4/deepseek_v32/config.json",
    "hf4/deepseek_v32/generation_config.json",
    "hf4/deepseek_v32/model.safetensors",
    "tokenizers/cases.txt",
    "chat/shown/chat_goldens.jsonl",
    "chat/shown/unit_goldens.jsonl",
]

# HDF5 golden files: (path, root members kept, members dropped); "cases/<name>" keeps one case
# of the cases group.
TRIMMED = [
    ("hf/llama_gqa/golden.h5", None, ["logits_bf16_weights"]),
    ("hf4/deepseek_v32/golden.h5", None,
     ["idx_head_scores", "idx_q", "idx_q_lin", "idx_qresid", "idx_k", "idx_k_lin",
      "idx_weights", "idx_weights_raw", "idx_scores_masked", "mixer_out", "attn_mask_bias"]),
    ("sparq/golden.h5",
     ["cases/edge_ties", "cases/edge_tiny_S5", "transfer_table"], []),
    ("methods/golden_methods.h5",
     ["cases/edge_ties", "cases/edge_tiny_S5", "transfer_table"], []),
    ("methods2/golden_methods2.h5",
     ["cases/edge_ties", "cases/edge_tiny_S6", "transfer_table"], []),
    ("methods3/golden_methods3.h5",
     ["cases/edge_ties", "cases/edge_tiny_S5", "transfer_table"], []),
]

# Tokenizers kept (their tokenizer.json and their lines of golden.jsonl).
TOKENIZERS = ["gpt2"]


def copy_attrs(src, dst):
    for k, v in src.attrs.items():
        dst.attrs[k] = v


def trim_h5(src_path, dst_path, keep, drop):
    with h5py.File(src_path, "r") as src, h5py.File(dst_path, "w") as dst:
        copy_attrs(src, dst)
        members = keep if keep is not None else [m for m in src.keys() if m not in drop]
        for m in members:
            if m not in src:
                sys.exit(f"make-test-data.py: {src_path} has no {m}")
            parent = os.path.dirname(m)
            if parent and parent not in dst:
                copy_attrs(src[parent], dst.create_group(parent))
            src.copy(src[m], dst[parent] if parent else dst, name=os.path.basename(m))


def main():
    shared = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                             os.path.join(ROOT, "..", "shared", "refs"))
    if not os.path.isdir(shared):
        sys.exit(f"make-test-data.py: {shared} (the full references) is missing")
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    for rel in COPIED:
        os.makedirs(os.path.dirname(os.path.join(OUT, rel)), exist_ok=True)
        shutil.copyfile(os.path.join(shared, rel), os.path.join(OUT, rel))
    for rel, keep, drop in TRIMMED:
        os.makedirs(os.path.dirname(os.path.join(OUT, rel)), exist_ok=True)
        trim_h5(os.path.join(shared, rel), os.path.join(OUT, rel), keep, drop)
    for name in TOKENIZERS:
        src = os.path.join(shared, "tokenizers", name, "tokenizer.json")
        with open(src, encoding="utf-8") as f:
            value = json.load(f)  # object key order is kept
        dst = os.path.join(OUT, "tokenizers", name, "tokenizer.json")
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        with open(dst, "w", encoding="utf-8") as f:
            json.dump(value, f, ensure_ascii=False, separators=(",", ":"))
        with open(dst, encoding="utf-8") as f:
            if json.load(f) != value:
                sys.exit(f"make-test-data.py: {dst} does not read back as {src}")
    with open(os.path.join(shared, "tokenizers", "golden.jsonl"), encoding="utf-8") as f, \
            open(os.path.join(OUT, "tokenizers", "golden.jsonl"), "w", encoding="utf-8") as out:
        for line in f:
            if line.strip() and json.loads(line)["tokenizer"] in TOKENIZERS:
                out.write(line)
    total = sum(os.path.getsize(os.path.join(d, f))
                for d, _, fs in os.walk(os.path.dirname(OUT)) for f in fs)
    print(f"make-test-data.py: {OUT} written; tests/data holds {total / 2**20:.2f} MiB")
    if total > LIMIT:
        sys.exit("make-test-data.py: tests/data is over 15 MiB")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes tests/data/unicode9_normalization.jsonl: strings with their NFC, NFD, NFKC and NFKD as
the tokenizers library computes them (Unicode 9.0's tables), asked of the library itself.

Kept: every supplementary-plane composite followed by a composed letter (Qt 6.4's composition
skips the character after such a pair), 500 strings whose normal forms by the library differ
from Python's (a newer Unicode: characters assigned since 9.0) and 100 of the rest.
text/unicode_normalize.cpp is checked against the file by tests/text/test_tokenizer.cpp.

Needs Node with the npm package `tokenizers` (HF's bindings of the Rust library):

    npm install --prefix /tmp/tok tokenizers
    python3 scripts/normalization-cases.py /tmp/tok/node_modules/tokenizers
"""
import json
import os
import random
import subprocess
import sys
import unicodedata

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
FORMS = ["nfc", "nfd", "nfkc", "nfkd"]
JS = """
const t = require(process.argv[1]); const fs = require('fs');
const parts = fs.readFileSync(0).toString('utf8').split('\\0'); parts.pop();
const out = {};
for (const f of ['nfc', 'nfd', 'nfkc', 'nfkd']) {
  const n = t[f + 'Normalizer']();
  out[f] = parts.map(s => n.normalizeString(s));
}
process.stdout.write(JSON.stringify(out));
"""


def candidates(rng):
    cps = [c for c in range(0x20, 0x110000) if not 0xD800 <= c <= 0xDFFF]
    marks = [c for c in cps if unicodedata.combining(chr(c))]
    comps = [c for c in cps if unicodedata.decomposition(chr(c))
             and not unicodedata.decomposition(chr(c)).startswith("<")]
    bug = []
    for c in comps:
        d = unicodedata.normalize("NFD", chr(c))
        if c > 0xFFFF and len(d) == 2:
            bug += [d + "\u00e9", d + "e\u0301", chr(c) + "\u00fc", d + "\ud55c"]
    rest = [f"a{chr(c)}\u0301 e\u0301{chr(c)}\u0316" for c in cps]
    for _ in range(50000):
        s = ""
        for _ in range(rng.randint(1, 6)):
            r = rng.random()
            if r < 0.4:
                s += chr(rng.choice(marks))
            elif r < 0.8:
                s += unicodedata.normalize("NFD", chr(rng.choice(comps)))
            else:
                s += rng.choice(["a", "e", "\u1100\u1161", "\u11a8", "\uac00", " ", chr(rng.choice(comps))])
        rest.append(s)
    return bug, rest


def main():
    module = os.path.abspath(sys.argv[1])
    rng = random.Random(9)
    bug, rest = candidates(rng)
    strings = bug + rest
    run = subprocess.run(["node", "-e", JS, module], input="\0".join(strings) + "\0",
                         capture_output=True, text=True, check=True)
    lib = json.loads(run.stdout)
    keep, newer, same = [], [], []
    for i, s in enumerate(strings):
        forms = dict(text=s, **{f: lib[f][i] for f in FORMS})
        if i < len(bug):
            keep.append(forms)
        elif any(forms[f] != unicodedata.normalize(f.upper(), s) for f in FORMS):
            newer.append(forms)
        else:
            same.append(forms)
    keep += rng.sample(newer, min(len(newer), 500)) + rng.sample(same, min(len(same), 100))
    rng.shuffle(keep)
    path = os.path.join(ROOT, "tests", "data", "unicode9_normalization.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for k in keep:
            f.write(json.dumps(k) + "\n")
    print(f"{path}: {len(keep)} strings ({len(bug)} after a supplementary composite, "
          f"{len(newer)} newer than 9.0 seen)")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""One table from scripts/gpu-check.sh's bench rows (bench.jsonl) and anchor (anchor.json), with
the goals of docs/design/CUDA.md §8 beside each figure. Usage: gpu_table.py bench.jsonl anchor.json"""
import json
import sys


def rows(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    out.append(json.loads(line))
    except OSError:
        pass
    return out


def fmt(x, spec="{:.1f}"):
    return "-" if x is None else spec.format(x)


def main():
    bench = rows(sys.argv[1])
    anchor = {}
    try:
        anchor = json.load(open(sys.argv[2]))
    except (OSError, ValueError, IndexError):
        pass
    print(f"device copy bandwidth (PyTorch): {fmt(anchor.get('copy_gbps'), '{:.0f}')} GB/s")
    sdpa_py = {(r["batch"], r["seq"]): r for r in anchor.get("sdpa", [])}
    print("\nDense and SparQ (r 32, k 128), fp16, H 32, d 128; times in us, CUDA graph replays; "
          "goals: dense >= 0.9 of copy and <= SDPA; SparQ >= 0.6 of theory; B=1 S=32k SparQ >= 3.5x SDPA")
    print(f"{'B':>3} {'S':>6} {'dense':>8} {'of copy':>8} {'sdpa':>8} {'sdpa(py)':>8} "
          f"{'sparq':>8} {'plain':>8} {'speedup':>8} {'theory':>7} {'frac':>6} {'sdpa/sparq':>10}")
    for r in bench:
        if "method" in r or r.get("device") != "cuda" or "sparq_graph_us" not in r:
            continue
        py = sdpa_py.get((r["batch"], r["seq"]), {})
        sp = r.get("sparq_graph_us")
        sd = r.get("sdpa_us")
        print(f"{r['batch']:>3} {r['seq']:>6} {fmt(r.get('dense_graph_us')):>8} "
              f"{fmt(r.get('dense_fraction_of_copy'), '{:.2f}'):>8} {fmt(sd):>8} "
              f"{fmt(py.get('sdpa_us')):>8} {fmt(sp):>8} {fmt(r.get('sparq_us')):>8} "
              f"{fmt(r.get('graph_speedup'), '{:.2f}'):>8} {fmt(r.get('theoretical_speedup'), '{:.2f}'):>7} "
              f"{fmt(r['graph_speedup'] / r['theoretical_speedup'] if r.get('graph_speedup') else None, '{:.2f}'):>6} "
              f"{fmt(sd / sp if sd and sp else None, '{:.2f}'):>10}")
    print("\nMethods (graph replays where the CUDA kernels run them); goal >= 0.5 of own theory")
    print(f"{'dtype':>5} {'B':>3} {'S':>6} {'Hq/Hkv':>6} {'method':<16} {'us':>8} {'graph':>8} "
          f"{'speedup':>8} {'theory':>7} {'frac':>6} {'path':>8}")
    for r in bench:
        if "method" not in r or r.get("device") != "cuda":
            continue
        gs = r.get("graph_speedup")
        th = r.get("theoretical_speedup")
        print(f"{r['dtype']:>5} {r['batch']:>3} {r['seq']:>6} {str(r['heads']) + '/' + str(r['kv_heads']):>6} "
              f"{r['method']:<16} {fmt(r.get('us')):>8} {fmt(r.get('graph_us')):>8} "
              f"{fmt(gs, '{:.2f}'):>8} {fmt(th, '{:.2f}'):>7} "
              f"{fmt(gs / th if gs and th else None, '{:.2f}'):>6} "
              f"{'kernels' if r.get('kernels') else 'libtorch':>8}")


if __name__ == "__main__":
    main()

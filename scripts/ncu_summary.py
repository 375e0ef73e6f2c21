#!/usr/bin/env python3
"""One profile of scripts/gpu-profile.sh in a few lines: from Nsight Compute's raw page (CSV) the
kernel's duration, DRAM throughput, occupancy, registers and block limits and its warps' stall
reasons (cycles per issued instruction); from its source page (CSV) the lines sampled most.

    ncu_summary.py NAME RAW.csv SOURCE.csv
    ncu_summary.py --durations NAME RAW.csv   # each kernel's launches and median duration
"""
import csv
import re
import sys


def rows(path):
    try:
        with open(path, newline="") as f:
            lines = [l for l in f if l.startswith('"')]
    except OSError:
        return []
    return list(csv.reader(lines))


def num(s):
    try:
        return float(str(s).replace(",", ""))
    except ValueError:
        return None


def raw_summary(name, path):
    table = rows(path)
    if len(table) < 3:
        print(f"{name}: no raw metrics ({path})")
        return
    head, units = table[0], table[1]
    for r in table[2:]:
        m = dict(zip(head, r))
        u = dict(zip(head, units))
        kernel = m.get("Kernel Name", "?")
        short = re.sub(r"\(.*", "", kernel)[:70]

        def get(key, scale=1.0, fmt="{:.1f}"):
            v = num(m.get(key, ""))
            return fmt.format(v * scale) if v is not None else "?"

        dur = num(m.get("gpu__time_duration.sum", ""))
        if dur is not None and u.get("gpu__time_duration.sum") == "nsecond":
            dur /= 1000.0
        elif dur is not None and u.get("gpu__time_duration.sum") == "msecond":
            dur *= 1000.0
        print(f"{name}: {short}  grid {m.get('launch__grid_size', '?')} x "
              f"{m.get('launch__block_size', '?')}")
        print(f"  duration {dur if dur is None else round(dur, 2)} us, DRAM "
              f"{get('dram__throughput.avg.pct_of_peak_sustained_elapsed')} % of peak, memory "
              f"{get('gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed')} %, SM "
              f"{get('sm__throughput.avg.pct_of_peak_sustained_elapsed')} %")
        print(f"  occupancy achieved {get('sm__warps_active.avg.pct_of_peak_sustained_active')} %"
              f" of theoretical {get('sm__maximum_warps_per_active_cycle_pct')} %; registers "
              f"{m.get('launch__registers_per_thread', '?')}, shared "
              f"{m.get('launch__shared_mem_per_block_dynamic', '?')} + "
              f"{m.get('launch__shared_mem_per_block_static', '?')} B a block; blocks an SM by "
              f"registers {m.get('launch__occupancy_limit_registers', '?')}, shared memory "
              f"{m.get('launch__occupancy_limit_shared_mem', '?')}, warps "
              f"{m.get('launch__occupancy_limit_warps', '?')}; waves "
              f"{get('launch__waves_per_multiprocessor', fmt='{:.2f}')}")
        stalls = []
        for k, v in m.items():
            s = re.match(r"smsp__average_warps?_(?:latency_)?issue_stalled_(\w+?)_per_issue_active\.ratio$", k)
            if s and num(v):
                stalls.append((num(v), s.group(1)))
        stalls.sort(reverse=True)
        cpi = get("smsp__average_warp_latency_per_inst_issued.ratio", fmt="{:.1f}")
        if stalls:
            print(f"  stalls (cycles per issued instruction; all {cpi}): " +
                  ", ".join(f"{r} {v:.1f}" for v, r in stalls[:7]))


def source_summary(name, path, top=14):
    table = rows(path)
    if len(table) < 2:
        print(f"  (no source page: {path})")
        return
    head = table[0]

    def col(*names):
        for n in names:
            for i, h in enumerate(head):
                if h.startswith(n):
                    return i
        return None

    src = col("Source")
    line = col("#", "Line")
    samp = col("Warp Stall Sampling (All", "Sampling Data (All")
    if src is None or samp is None:
        print(f"  (source page without samples: columns {head[:8]})")
        return
    data = []
    total = 0.0
    for r in table[1:]:
        if len(r) <= max(src, samp):
            continue
        v = num(r[samp])
        if v is None:
            continue
        total += v
        data.append((v, r[line] if line is not None else "?", r[src].strip()))
    data.sort(reverse=True)
    print(f"  source lines by stall samples (of {int(total)}):")
    for v, ln, text in data[:top]:
        if v <= 0:
            break
        print(f"    {100 * v / (total or 1):5.1f} %  {ln:>5}  {text[:100]}")


def durations_summary(name, path):
    """Each kernel's launches and median duration, in the order first launched."""
    table = rows(path)
    if len(table) < 3:
        print(f"{name}: no durations ({path})")
        return
    head, units = table[0], table[1]
    if "gpu__time_duration.sum" not in head or "Kernel Name" not in head:
        print(f"{name}: no durations (columns {head[:6]})")
        return
    k, d = head.index("Kernel Name"), head.index("gpu__time_duration.sum")
    scale = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3}.get(units[d], 1.0)
    seen = {}
    for r in table[2:]:
        v = num(r[d])
        if v is not None:
            seen.setdefault(re.sub(r"\(.*", "", r[k])[:80], []).append(v * scale)
    print(f"{name}: kernels launched (count, median us, min us)")
    for kernel, v in seen.items():
        v.sort()
        print(f"  {len(v):4d} {v[len(v) // 2]:9.2f} {v[0]:9.2f}  {kernel}")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--durations":
        durations_summary(sys.argv[2], sys.argv[3])
        sys.exit(0)
    if len(sys.argv) != 4:
        sys.exit("usage: ncu_summary.py NAME RAW.csv SOURCE.csv")
    raw_summary(sys.argv[1], sys.argv[2])
    source_summary(sys.argv[1], sys.argv[3])

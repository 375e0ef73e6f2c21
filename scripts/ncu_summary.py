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


def short_name(kernel):
    """A demangled kernel name without its return type, namespaces and parameter list."""
    k = kernel.strip().replace("(anonymous namespace)::", "")
    k = re.sub(r"\([^()]*\)$", "", k)
    k = re.sub(r"^void ", "", k)
    k = re.sub(r"^(\w+::)+", "", k)
    return k[:80]


def num(s):
    try:
        return float(str(s).replace(",", ""))
    except ValueError:
        return None


US_PER = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6}


def raw_table(name, path, what):
    """A raw page's header, units and rows, or None (said) when it holds none."""
    table = rows(path)
    if len(table) < 3:
        print(f"{name}: no {what} ({path})")
        return None
    return table[0], table[1], table[2:]


def raw_summary(name, path):
    got = raw_table(name, path, "raw metrics")
    if got is None:
        return
    head, units, data = got
    for r in data:
        m = dict(zip(head, r))
        u = dict(zip(head, units))
        kernel = m.get("Kernel Name", "?")
        short = short_name(kernel)

        def get(key, scale=1.0, fmt="{:.1f}"):
            v = num(m.get(key, ""))
            return fmt.format(v * scale) if v is not None else "?"

        dur = num(m.get("gpu__time_duration.sum", ""))
        if dur is not None:
            dur *= US_PER.get(u.get("gpu__time_duration.sum"), 1.0)
        dram = get("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed")
        if dram == "?":
            dram = get("dram__throughput.avg.pct_of_peak_sustained_elapsed")
        print(f"{name}: {short}  grid {m.get('launch__grid_size', '?')} x "
              f"{m.get('launch__block_size', '?')}")
        print(f"  duration {dur if dur is None else round(dur, 2)} us, DRAM "
              f"{dram} % of peak, memory "
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
            if s and s.group(1) != "selected" and num(v):  # (selected: the issue itself)
                stalls.append((num(v), s.group(1)))
        stalls.sort(reverse=True)
        cpi = get("smsp__average_warp_latency_per_inst_issued.ratio", fmt="{:.1f}")
        if stalls:
            print(f"  stalls (cycles per issued instruction; all {cpi}): " +
                  ", ".join(f"{r} {v:.1f}" for v, r in stalls[:7]))


def source_summary(name, path, top=14):
    """The CUDA lines whose instructions were sampled most (a `--print-source cuda,sass` page:
    each SASS row's samples go to the CUDA line above it; a SASS-only page lists instructions)."""
    table = rows(path)
    at = next((i for i, r in enumerate(table)
               if any(c.startswith("Warp Stall Sampling (All") for c in r)), None)
    if at is None:
        print(f"  (no stall samples in the source page: {path})")
        return
    head = table[at]
    samp = next(i for i, c in enumerate(head) if c.startswith("Warp Stall Sampling (All"))
    line = next((i for i, c in enumerate(head) if c in ("Line No", "Line", "#")), None)
    addr = next((i for i, c in enumerate(head) if c == "Address"), None)
    srcs = [i for i, c in enumerate(head) if c == "Source"]
    cuda_src = srcs[0] if srcs and (line is not None and srcs[0] > line) else None
    sass_src = srcs[-1] if srcs else None
    by_line, text, by_inst = {}, {}, []
    current = None
    cuda_rows = {}
    for r in table[at + 1:]:
        if len(r) <= samp:
            continue
        v = num(r[samp]) or 0.0
        is_sass = addr is not None and r[addr].startswith("0x")
        if line is not None and r[line].strip() and not is_sass:
            current = r[line].strip()
            if cuda_src is not None:
                text.setdefault(current, r[cuda_src].strip())
            cuda_rows[current] = cuda_rows.get(current, 0.0) + v
        if is_sass:
            by_inst.append((v, r[addr], r[sass_src].strip() if sass_src is not None else ""))
            if current is not None:
                by_line[current] = by_line.get(current, 0.0) + v
    if not by_line:
        by_line = cuda_rows  # (no SASS rows: the CUDA lines' own samples)
    if by_line and sum(by_line.values()) > 0:
        total = sum(by_line.values())
        print(f"  CUDA lines by stall samples (of {int(total)}):")
        for ln, v in sorted(by_line.items(), key=lambda x: -x[1])[:top]:
            print(f"    {100 * v / total:5.1f} %  {ln:>5}  {text.get(ln, '')[:100]}")
    elif by_inst:
        total = sum(v for v, _, _ in by_inst) or 1.0
        print(f"  instructions by stall samples (of {int(total)}):")
        for v, a, t in sorted(by_inst, reverse=True)[:top]:
            print(f"    {100 * v / total:5.1f} %  {a}  {t[:100]}")
    else:
        print(f"  (no samples in {path})")


def durations_summary(name, path):
    """Each kernel's launches and median duration, in the order first launched."""
    got = raw_table(name, path, "durations")
    if got is None:
        return
    head, units, data = got
    if "gpu__time_duration.sum" not in head or "Kernel Name" not in head:
        print(f"{name}: no durations (columns {head[:6]})")
        return
    k, d = head.index("Kernel Name"), head.index("gpu__time_duration.sum")
    scale = US_PER.get(units[d], 1.0)
    seen = {}
    for r in data:
        v = num(r[d])
        if v is not None:
            seen.setdefault(short_name(r[k]), []).append(v * scale)
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

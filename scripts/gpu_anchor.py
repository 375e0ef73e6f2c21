#!/usr/bin/env python3
"""The anchors of docs/design/CUDA.md §8, measured from PyTorch on the GPU machine in the same run
as scripts/gpu-check.sh's benches: scaled_dot_product_attention (fp16, one query, H = 32,
d = 128) at the §4 shapes, and the device-to-device copy bandwidth. CUDA events around single
calls, the L2 cache evicted before each, medians. Prints one JSON object."""
import json
import statistics

import torch


def timed(fn, repeats=30, warmup=5):
    flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size // 4 + 1024,
                        dtype=torch.float32, device="cuda")
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    flush.fill_(1.0)
    for i in range(warmup + repeats):
        flush.sum()  # reads only: the L2 cache holds clean lines, as the C++ bench's L2Flusher
        torch.cuda.synchronize()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        if i >= warmup:
            out.append(start.elapsed_time(stop) * 1e3)
    return statistics.median(out)


def main():
    props = torch.cuda.get_device_properties(0)
    result = {"device": props.name, "sms": props.multi_processor_count, "torch": torch.__version__}
    n = 1 << 30
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    a.fill_(1)
    copy_us = timed(lambda: b.copy_(a), repeats=10, warmup=2)
    result["copy_gbps"] = 2 * n / (copy_us * 1e-6) / 1e9
    del a, b
    rows = []
    for batch, seq in [(64, 4096), (4, 16384), (1, 32768)]:
        q = torch.randn(batch, 32, 1, 128, dtype=torch.float16, device="cuda")
        k = torch.randn(batch, 32, seq, 128, dtype=torch.float16, device="cuda")
        v = torch.randn(batch, 32, seq, 128, dtype=torch.float16, device="cuda")
        us = timed(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v))
        nbytes = 2 * k.numel() * 2
        rows.append({"batch": batch, "seq": seq, "sdpa_us": us,
                     "sdpa_fraction_of_copy": nbytes / (us * 1e-6) / 1e9 / result["copy_gbps"]})
        del q, k, v
    result["sdpa"] = rows
    print(json.dumps(result))


if __name__ == "__main__":
    main()

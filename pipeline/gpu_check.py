"""`make gpu-check`: the prepared device script. Without CUDA it says so and exits 0.

With CUDA it reports the device and times a bf16 matmul; the training and vLLM checks
join this script as those issues land. Figures it prints go to the README.
"""

from __future__ import annotations

import json
import sys
import time


def main() -> int:
    try:
        import torch
    except ImportError:
        print("gpu-check skipped: torch is not installed (install the `train` extra)")
        return 0
    if not torch.cuda.is_available():
        print(f"gpu-check skipped: no CUDA device (torch {torch.__version__})")
        return 0
    dev = torch.device("cuda")
    name = torch.cuda.get_device_name(dev)
    n = 8192
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    reps = 20
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / reps
    figures = {"device": name, "bf16_matmul_n": n, "bf16_tflops": 2 * n**3 / dt / 1e12}
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""One "inference pod" start: a fresh process that compiles a small transformer with torch.compile.

The cache folders come from the environment exactly as in the vLLM pod (XDG_CACHE_HOME,
TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR under one folder). Prints one JSON line with the timings.
Runs unchanged on a GPU machine (it uses CUDA when torch sees one).
"""

from __future__ import annotations

import json
import sys
import time


def main(sequence_length: int) -> None:
    started = time.perf_counter()
    import torch
    from torch import nn

    imported = time.perf_counter()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)

    class Block(nn.Module):
        def __init__(self, width: int) -> None:
            super().__init__()
            self.attention = nn.MultiheadAttention(width, 4, batch_first=True)
            self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

        def forward(self, x):
            attended, _ = self.attention(self.norm1(x), self.norm1(x), self.norm1(x), need_weights=False)
            x = x + attended
            return x + self.mlp(self.norm2(x))

    model = nn.Sequential(*(Block(256) for _ in range(4))).to(device).eval()
    compiled = torch.compile(model, dynamic=False)
    inputs = torch.randn(2, sequence_length, 256, device=device)
    with torch.no_grad():
        first = time.perf_counter()
        output = compiled(inputs)
        if device == "cuda":
            torch.cuda.synchronize()
        compiled_at = time.perf_counter()
        second = compiled(inputs)
        if device == "cuda":
            torch.cuda.synchronize()
        steady = time.perf_counter()
    print(
        json.dumps(
            {
                "device": device,
                "torch": torch.__version__,
                "import_s": imported - started,
                "first_call_s": compiled_at - first,
                "second_call_s": steady - compiled_at,
                "checksum": float(output.double().sum()),
                "consistent": bool(torch.allclose(output, second)),
            }
        )
    )


if __name__ == "__main__":
    main(int(sys.argv[1]))

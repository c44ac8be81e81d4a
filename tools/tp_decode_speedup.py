"""Batch-1 decode speed-up from tensor parallelism: the cost model against gpt-fast's measurements.

    python tools/tp_decode_speedup.py [--overhead-s 0] [--allreduce custom|nccl]

Prices one decode step of one sequence (context 128, about the middle of gpt-fast's 200-token
generations after a 5-token prompt) for Llama-2-7B at TP 1/2/4/8 and Llama-2-70B at TP 2/4/8 on
A100-80GB with the shipped calibration, and prints tokens/s and the speed-up over the smallest TP
next to gpt-fast's (pytorch-labs/gpt-fast README benchmark table: 8 x A100-80GB at 330 W, batch 1,
torch.compile with CUDA graphs, ENABLE_INTRA_NODE_COMM=1, i.e. PyTorch's one-shot intra-node
all-reduce): 7B 104.9 / 168.84 / 254.02 / 328.43 tok/s, 70B 21.32 / 38.01 / 62.50 tok/s.

gpt-fast runs no scheduler, so the step's CPU overhead defaults to 0 here. Its GPUs are capped at
330 W ("peak bandwidth about 1700 GB/s", its README), so absolute tokens/s are expected above
gpt-fast's by up to the 2039 / 1700 bandwidth ratio; the speed-ups are the comparison. Works on
any servesim checkout that has ``CostModel`` and ``synthetic_batch`` (to compare before / after).
"""

from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# pytorch-labs/gpt-fast README, tokens/s at batch 1 on 8 x A100-80GB (330 W)
GPT_FAST = {"meta-llama/Llama-2-7b-hf": {1: 104.9, 2: 168.84, 4: 254.02, 8: 328.43},
            "meta-llama/Llama-2-70b-hf": {2: 21.32, 4: 38.01, 8: 62.50}}


def main() -> int:
    from servesim.core.batch import synthetic_batch
    from servesim.cost import CostModel
    from servesim.cost.calibration import efficiencies_for
    from servesim.inputs.specs import get_gpu, get_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--overhead-s", type=float, default=0.0, help="per-step CPU overhead (gpt-fast: none)")
    ap.add_argument("--allreduce", default="custom", help="custom | nccl (checkouts that have the option)")
    ap.add_argument("--context", type=int, default=128)
    args = ap.parse_args()
    gpu = get_gpu("a100-80g")
    eff = efficiencies_for(gpu)
    kw = {"allreduce": args.allreduce} if "allreduce" in inspect.signature(CostModel).parameters else {}
    print("| model | TP | step ms | all-reduce ms | tok/s | gpt-fast tok/s | speed-up | gpt-fast speed-up |")
    print("|---|---|---|---|---|---|---|---|")
    for name, meas in GPT_FAST.items():
        model = get_model(name)
        base = None
        for tp, tok_s in meas.items():
            cm = CostModel(model, gpu, tp=tp, step_overhead_s=args.overhead_s, per_seq_overhead_s=0.0, eff=eff, **kw)
            c = cm.step_time(synthetic_batch(decode_contexts=[args.context]))
            rate = 1.0 / c.time_s
            base = base or (rate, tok_s)
            print(f"| {name.split('/')[1]} | {tp} | {c.time_s * 1e3:.2f} | {c.comm_s * 1e3:.2f} | {rate:.0f} | "
                  f"{tok_s:.0f} | {rate / base[0]:.2f} | {tok_s / base[1]:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

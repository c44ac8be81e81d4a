"""Recompute the length tables of ``scenarios/reproduce/*.yaml`` from the published traces.

Only the tables (quantiles) ship with servesim; the traces stay where they are published:

* ``SHAREGPT_8K``: ``data/processed_traces/sharegpt_8k_filtered_stats_llama2_tokenizer.csv`` of
  microsoft/sarathi-serve (branch niyama_asplos2026; Apache-2.0), the openchat_sharegpt4 trace of
  Sarathi-Serve's Table 2: 30,731 conversation rounds, each prompt carrying its conversation so far.
* ``VLLM_PKL``: ``datasets/sharegpt_opt_text_completion_length.pkl`` of sosp-ae-39/sosp-ae-astra,
  the vLLM paper's artifact: (input, output) lengths of ShareGPT first rounds, OPT tokenizer. Read
  with an unpickler that refuses every class (the file is plain tuples of ints and lists).

    python tools/reproduce_lengths.py SHAREGPT_8K VLLM_PKL

prints, per table, the quantiles at ``P`` (a piecewise-linear inverse CDF for ``dist: quantiles``)
and the data's mean next to the table's.
"""

from __future__ import annotations

import csv
import pickle
import sys

import numpy as np

P = [0, 0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 1]
DISTSERVE_MAX = 2048  # DistServe keeps prompt + output < 2048 (OPT's positions)
SEED = 0


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing {module}.{name}: only plain data is expected")


def table(values) -> np.ndarray:
    return np.maximum(np.quantile(np.asarray(values, float), P), 1)


def table_mean(t) -> float:
    p = np.asarray(P)
    return float(np.sum((p[1:] - p[:-1]) * (t[1:] + t[:-1]) / 2))


def show(name: str, values) -> None:
    t = table(values)
    print(f"{name}: tokens: [{', '.join(f'{x:.0f}' for x in t)}]  "
          f"(data mean {np.mean(values):.1f}, table mean {table_mean(t):.1f}, n {len(values)})")


def main(sharegpt_8k: str, vllm_pkl: str) -> None:
    with open(sharegpt_8k, newline="") as fh:
        rows = list(csv.DictReader(fh))
    p = np.array([int(r["num_prefill_tokens"]) for r in rows])
    d = np.array([int(r["num_decode_tokens"]) for r in rows])
    with open(vllm_pkl, "rb") as fh:
        pairs = _PlainUnpickler(fh).load()
    x = np.array([(a if isinstance(a, int) else len(a), b if isinstance(b, int) else len(b)) for a, b in pairs])
    first = x[(x[:, 0] + x[:, 1]) < 2048]  # the vLLM benchmark's filter (trace.py, max_seq_len 2048)
    print(f"p: {P}")
    show("vllm-opt13b prompt (ShareGPT first inputs)", first[:, 0])
    show("vllm-opt13b output (ShareGPT first replies)", first[:, 1])
    show("sarathi prompt (openchat_sharegpt4)", p)
    show("sarathi output (openchat_sharegpt4)", d)
    # DistServe: prompt = a conversation's first k turns, k uniform, output = turn k + 1: a reply
    # (k odd: a round of the 8k trace) or a user turn (k even: that round's prompt and reply as the
    # prompt, a user message of the vLLM trace as the output), half each; kept when < 2048 tokens
    rng = np.random.default_rng(SEED)
    n = 400_000
    i = rng.integers(len(p), size=n)
    user = x[rng.integers(len(x), size=n), 0]
    reply = rng.random(n) < 0.5
    prompt = np.where(reply, p[i], p[i] + d[i])
    out = np.where(reply, d[i], user)
    keep = (prompt + out < DISTSERVE_MAX) & ~((prompt < 4) & (out < 4))
    print(f"distserve reply share after the filter: {(reply & keep).sum() / keep.sum():.2f}; means "
          f"{prompt[keep].mean():.0f} / {out[keep].mean():.0f}")
    for cls, m in (("reply", reply & keep), ("user_turn", ~reply & keep)):
        show(f"distserve {cls} prompt", prompt[m])
        show(f"distserve {cls} output", out[m])


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])

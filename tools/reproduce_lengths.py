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
    show_distserve(x)


# ShareGPT_V3_unfiltered_cleaned_split.json, the file DistServe's AE reads: 94,145 samples holding
# 330,239 rounds, 3.51 rounds a sample (LMSYS-Chat-1M, Zheng et al., ICLR'24, Table 1); FastChat's
# split_long_conversation.py cut its conversations at round boundaries into samples of at most 2048
# tokens (--max-length 2048)
SHAREGPT_ROUNDS_PER_SAMPLE = 3.51
SHAREGPT_SPLIT_TOKENS = 2048


def distserve_requests(first_rounds, n_conversations: int = 100_000, seed: int = SEED):
    """DistServe's ShareGPT requests rebuilt from ShareGPT's first rounds (``first_rounds``: (user
    message, reply) token lengths, OPT tokenizer): conversations of R rounds, R geometric with
    ShareGPT's mean rounds per sample, every message drawn from the first rounds' user messages and
    replies (no figure says how later turns differ), cut at FastChat's 2048-token split; then, as
    DistServe's AE 0-prepare-dataset.py, of each sample of at least 3 messages: k uniform in
    1 .. messages - 1, prompt = the first k messages joined (a message's BOS token stands for its
    joining newline), output = message k + 1 (a reply when k is odd, a user message when k is
    even), dropped when prompt + output >= 2048 or both < 4 tokens. Returns {class: (prompts,
    outputs)} for the classes ``reply`` and ``user_turn``."""
    rng = np.random.default_rng(seed)
    h, g = first_rounds[:, 0], first_rounds[:, 1]
    out = {"reply": ([], []), "user_turn": ([], [])}
    for r in rng.geometric(1 / SHAREGPT_ROUNDS_PER_SAMPLE, size=n_conversations):
        msgs = np.column_stack([h[rng.integers(len(h), size=r)], g[rng.integers(len(g), size=r)]])
        samples, cur, length = [], [], 0
        for u, a in msgs.tolist():
            if cur and length + u + a > SHAREGPT_SPLIT_TOKENS:
                samples.append(cur)
                cur, length = [], 0
            cur += [u, a]
            length += u + a
        samples.append(cur)
        for sm in samples:
            if len(sm) < 3:
                continue
            k = int(rng.integers(1, len(sm)))
            prompt, output = sum(sm[:k]), sm[k]
            if prompt + output >= DISTSERVE_MAX or (prompt < 4 and output < 4):
                continue
            cls = out["reply" if k % 2 else "user_turn"]
            cls[0].append(prompt)
            cls[1].append(output)
    return {c: (np.array(p), np.array(o)) for c, (p, o) in out.items()}


def show_distserve(first_rounds) -> None:
    req = distserve_requests(first_rounds)
    n = sum(len(p) for p, _ in req.values())
    allp = np.concatenate([p for p, _ in req.values()])
    allo = np.concatenate([o for _, o in req.values()])
    print(f"distserve: {n} requests; means {allp.mean():.0f} / {allo.mean():.0f}; prompts above 1440 tokens "
          f"{np.mean(allp > 1440):.1%}")
    for cls, (p, o) in req.items():
        print(f"distserve {cls}: share {len(p) / n:.2f}")
        show(f"distserve {cls} prompt", p)
        show(f"distserve {cls} output", o)

if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])

"""The memoized ``step_time`` is bit for bit the plain sum over ``_ops``."""

from hypothesis import given, settings, strategies as st

from servesim.core.batch import synthetic_batch
from servesim.cost import CostModel
from servesim.inputs.specs import get_gpu, get_model

from servesim.cost.engines import _vllm_v0_sizes, _vllm_v1_sizes  # noqa: E402

_L7, _H100 = get_model("meta-llama/Llama-2-7b-hf"), get_gpu("h100-sxm")
MODELS = [CostModel(_L7, _H100),
          CostModel(get_model("meta-llama/Meta-Llama-3-8B"), get_gpu("h100-sxm"), tp=2, pp=2),
          CostModel(get_model("mistralai/Mixtral-8x7B-v0.1"), get_gpu("h100-sxm"), tp=4),
          # latent attention, shared experts, dense layers, expert parallelism, FP8
          CostModel(get_model("deepseek-ai/DeepSeek-V3"), get_gpu("h200"), tp=8, dtype="fp8", expert_parallel=True),
          CostModel(get_model("Qwen/Qwen3-30B-A3B"), get_gpu("a100-80g"), tp=2, allreduce="nccl"),
          # engine terms (sim/cost/engines.py): CPU work mostly overlapped, its overlapped share
          # outlasting the GPU's step at small batches only; every step up to 128 tokens graphed and
          # padded, larger ones paced by the CPU's launches (decode runs above 128 sequences too)
          CostModel(_L7, _H100, step_overhead_s=8e-3, per_seq_overhead_s=2e-5, per_token_overhead_s=1e-6,
                    overlap=0.9, graph_sizes=_vllm_v1_sizes(64, 1), eager_layer_s=3e-4),
          # decode-only graphs (vLLM V0), synchronous CPU, eager prefill paced by launches
          CostModel(get_model("meta-llama/Meta-Llama-3-8B"), _H100, tp=2, step_overhead_s=2e-3,
                    per_seq_overhead_s=1.7e-4, graph_sizes=_vllm_v0_sizes(100, 2), graph_mixed=False,
                    eager_layer_s=2.6e-4),
          # no graphs, launch-bound (HF eager)
          CostModel(_L7, _H100, step_overhead_s=0.0, per_seq_overhead_s=0.0, eager_layer_s=1.2e-3)]


@settings(max_examples=300, deadline=None)
@given(st.integers(0, len(MODELS) - 1),
       st.lists(st.tuples(st.integers(1, 3000), st.integers(0, 3000)), max_size=3),
       st.lists(st.integers(1, 4000), max_size=40), st.integers(0, 3))
def test_memoized_step_time_is_exact(m, prefill, decode, spec):
    cm = MODELS[m]
    b = synthetic_batch(prefill, decode, spec)
    for _ in range(2):  # cold, then from the memo
        assert cm.step_time(b) == cm.step_time_reference(b)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, len(MODELS) - 1), st.lists(st.integers(1, 4000), min_size=1, max_size=60),
       st.integers(1, 40))
def test_vectorized_decode_steps_are_exact(m, contexts, k):
    """Step i of a decode run: every sequence has grown by i tokens."""
    import numpy as np

    cm = MODELS[m]
    n = len(contexts)
    dctx = np.array([sum(contexts) + i * n + n for i in range(k)])
    t, f, b, comp = cm.decode_steps(n, dctx)
    for i in range(k):
        ref = cm.step_time_reference(synthetic_batch((), [c + i for c in contexts]))
        assert (t[i], f[i], b[i], bool(comp[i])) == (ref.time_s, ref.flops, ref.bytes, ref.bound == "compute")


# attention compute efficiency so low that decode attention turns compute-bound past some context:
# a run of steps can cross from one branch of max(compute, memory) to the other
import dataclasses  # noqa: E402

from servesim.cost.efficiency import DEFAULT_EFFICIENCIES, OpEfficiency  # noqa: E402

_SLOW_ATTN = dataclasses.replace(DEFAULT_EFFICIENCIES, attention=OpEfficiency(0.0026, 0.8, 1e-6))
TIMES_MODELS = MODELS + [CostModel(get_model("meta-llama/Llama-2-7b-hf"), get_gpu("h100-sxm"), eff=_SLOW_ATTN)]


@settings(max_examples=300, deadline=None)
@given(st.integers(0, len(TIMES_MODELS) - 1), st.integers(1, 300), st.integers(1, 400_000), st.integers(1, 40))
def test_decode_step_times_are_decode_steps_times(m, n, start, k):
    """The engine's hot path (times only, one branch of the roofline max taken for the whole run
    when its ends agree) gives exactly ``decode_steps``' times, across the branch crossing too."""
    cm = TIMES_MODELS[m]
    dctx = [start + n * i for i in range(k)]
    assert cm.decode_step_times(n, dctx) == list(cm.decode_steps(n, dctx)[0])


def test_engine_model_crosses_the_overlap_branch():
    """The overlapped CPU share outlasts the GPU's step at batch 1 and hides under it at batch 200
    (so the tests above cover both sides of ``_finish``'s max)."""
    cm = next(m for m in MODELS if m.overlap == 0.9)  # the engine-terms model above
    small, big = synthetic_batch((), [100]), synthetic_batch((), [2000] * 200)
    hidden = [cm.overlap * cm._overhead_s(b.num_seqs, b.num_tokens) for b in (small, big)]
    gpu = [cm.step_time(b).time_s - cm.step_time(b).overhead_s for b in (small, big)]
    assert hidden[0] > gpu[0] and hidden[1] < gpu[1]


def test_slow_attention_model_crosses_branches():
    """The model above does cross (so the test covers the fallback and the compute branch)."""
    cm = TIMES_MODELS[-1]
    comp = [bool(cm._attention(synthetic_batch((), [x]), 1)[3] > cm._attention(synthetic_batch((), [x]), 1)[4])
            for x in (10, 400_000)]
    assert comp == [False, True]


@settings(max_examples=100, deadline=None)
@given(st.integers(0, len(TIMES_MODELS) - 1),
       st.lists(st.tuples(st.integers(1, 300), st.integers(1, 400_000)), min_size=1, max_size=50))
def test_decode_rows_are_decode_steps(m, rows):
    """Row by row (mixed batch sizes), the figures filled into the step columns afterwards are
    those ``decode_steps`` gives each step."""
    cm = TIMES_MODELS[m]
    t, f, b, c = cm.decode_rows([n for n, _ in rows], [x for _, x in rows])
    for i, (n, x) in enumerate(rows):
        t1, f1, b1, c1 = cm.decode_steps(n, [x])
        assert (t[i], f[i], b[i], bool(c[i])) == (t1[0], f1[0], b1[0], bool(c1[0]))
        assert t[i] == cm.decode_step_times(n, [x])[0]

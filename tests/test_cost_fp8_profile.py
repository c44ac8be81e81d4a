"""FP8 GEMM timings (``fp8_gemm.csv``, servesim's own format): read with errors that name the file,
line and column, and fitted to ``gemm_fp8.compute_scale`` by ``servesim calibrate``."""

import numpy as np
import pytest

from servesim.cost.calibration import efficiencies_for
from servesim.cost.efficiency import Fp8GemmEfficiency
from servesim.cost.fitting import fit_fp8, fp8_gemm_time_np
from servesim.cost.profiles import Fp8GemmProfile, read_fp8_profile
from servesim.errors import InputError
from servesim.inputs.specs import GPUS

H200 = GPUS["h200"]


def test_fp8_fit_recovers_a_known_share_and_bad_files_are_input_errors(tmp_path):
    g = efficiencies_for(H200).gemm
    M = np.array([16, 64, 256, 1024, 4096, 8192] * 2, float)
    K = np.array([4096] * 6 + [8192] * 6, float)
    N = np.array([12288] * 6 + [57344] * 6, float)
    y = fp8_gemm_time_np(M, K, N, H200, g, Fp8GemmEfficiency(0.8))
    fit = fit_fp8([Fp8GemmProfile(tmp_path, M, K, N, y)], H200, g)
    assert fit.compute_scale == pytest.approx(0.8, rel=1e-3)
    assert fit_fp8([Fp8GemmProfile(tmp_path, M, K, N, y)], GPUS["a100-80g"], g) is None  # no FP8 tensor cores
    f = tmp_path / "fp8_gemm.csv"
    f.write_text("M,K,fp8_ms\n16,4096,0.02\n")
    with pytest.raises(InputError, match="missing column 'N'"):
        read_fp8_profile(f)
    f.write_text("M,K,N,fp8_ms\n16,4096,4096,0\n")
    with pytest.raises(InputError, match="fp8_ms must be positive"):
        read_fp8_profile(f)
    f.write_text("M,K,N,fp8_ms\n16,4096,x,0.02\n")
    with pytest.raises(InputError, match="line 2: column 'N'"):
        read_fp8_profile(f)

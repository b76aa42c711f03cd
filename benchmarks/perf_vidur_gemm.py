"""Compare the roofline's GEMM part with the per-layer GEMM timings Vidur publishes (A100/H100).

Vidur (github.com/microsoft/vidur, MIT licence) ships profiled kernel times under
``data/profiling/compute/<gpu>/<model>/mlp.csv``: per token count and TP degree, the median
time of each linear layer of one decoder layer (QKV projection, output projection, MLP up/gate
and down projections). This script sums those four GEMMs, fits the smooth roofline

    t = (c^p + m^p)^(1/p) + n_kernels x t0,   c = 2 T W / (peak x eta_c),   m = 2 W / (BW x eta_m)

(W = weights per rank of one layer, T = tokens) per GPU, and prints the fitted efficiencies and
the fit's error per model and TP. The data are not shipped with servesim; point the script at
a Vidur checkout:

    uv run python benchmarks/perf_vidur_gemm.py --vidur-dir PATH/TO/vidur

The generic priors (``HardwareProfile`` defaults: gemm_compute_efficiency 0.73,
gemm_bandwidth_efficiency 0.9, gemm_roofline_sharpness 1.25) come from this comparison on H100
and A100; docs/perf.md records its output.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import pandas as pd

from servesim.perf.fit import fit_log_coefficients

GPUS = {"h100": (989.5e12, 3.35e12), "a100": (312e12, 2.039e12)}
GEMMS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")


def load(vidur: Path, gpu: str) -> pd.DataFrame:
    rows = []
    for f in sorted((vidur / "data" / "profiling" / "compute" / gpu).glob("*/*/mlp.csv")):
        d = pd.read_csv(f)
        model = f.parent.name
        for _, r in d.iterrows():
            tp = int(r["num_tensor_parallel_workers"])
            h, i = int(r["n_embd"]), int(r["n_expanded_embd"])
            nh, nkv = int(r["n_head"]), int(r["n_kv_head"])
            hd = h // nh
            gated = bool(r["use_gated_mlp"])
            w = (h * (nh + 2 * nkv) * hd + nh * hd * h + (3 if gated else 2) * h * i) / tp
            t = sum(float(r[f"time_stats.{g}.median"]) for g in GEMMS) * 1e-3
            rows.append({"model": model, "tp": tp, "tokens": int(r["num_tokens"]), "weights": w, "time": t})
    return pd.DataFrame(rows)


def predict(x: np.ndarray, df: pd.DataFrame, peak: float, bw: float) -> np.ndarray:
    eta_c, eta_m, p, t0 = np.exp(x)
    c = 2 * df["tokens"].to_numpy() * df["weights"].to_numpy() / (peak * eta_c)
    m = 2 * df["weights"].to_numpy() / (bw * eta_m)
    out: np.ndarray = (c**p + m**p) ** (1 / p) + len(GEMMS) * t0
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vidur-dir", type=Path, required=True, help="A checkout of microsoft/vidur.")
    args = ap.parse_args()
    for gpu, (peak, bw) in GPUS.items():
        df = load(args.vidur_dir, gpu)
        if df.empty:
            print(f"{gpu}: no data under {args.vidur_dir}")
            continue
        meas = df["time"].to_numpy()
        res = fit_log_coefficients(
            lambda x, df=df, peak=peak, bw=bw, meas=meas: np.log(predict(x, df, peak, bw) / meas),
            np.log([0.7, 0.85, 4.0, 2e-6]),
            lower=np.log([0.05, 0.05, 1.0, 1e-8]),
            upper=np.log([1.0, 1.0, 50.0, 1e-4]),
        )
        eta_c, eta_m, p, t0 = np.exp(res.x)
        pred = predict(res.x, df, peak, bw)
        ape = 100 * np.abs(pred - meas) / meas
        print(
            f"{gpu}: {len(df)} rows; gemm_compute_efficiency {eta_c:.3f}, "
            f"gemm_bandwidth_efficiency {eta_m:.3f}, sharpness p {p:.2f}, "
            f"per-GEMM fixed cost {t0 * 1e6:.2f} us; "
            f"MAPE {ape.mean():.1f} %, median {np.median(ape):.1f} %"
        )
        df = df.assign(ape=ape)
        for (model, tp), g in df.groupby(["model", "tp"]):
            print(f"    {model:32s} tp{tp}: MAPE {g['ape'].mean():5.1f} %  (max {g['ape'].max():5.1f} %)")
        big = df[df["tokens"] >= 2048]
        small = df[df["tokens"] <= 32]
        if len(big) and len(small):
            ach_c = (2 * big["tokens"] * big["weights"] / big["time"] / peak).median()
            ach_m = (2 * small["weights"] / small["time"] / bw).median()
            print(
                f"    achieved (median): {ach_c:.2f} of peak FLOP/s at >= 2048 tokens, "
                f"{ach_m:.2f} of peak bandwidth at <= 32 tokens"
            )
        if not math.isfinite(res.cost):
            print("    fit failed")


if __name__ == "__main__":
    main()

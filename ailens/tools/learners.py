"""The learners of the step-time residual over the analytic what-if (docs/learned.md):
ridge regression and gradient-boosted trees in numpy, an FI-Net-style network in torch
(``pip install ailens[learn]``). Each is fitted on pairs (features, log residual) and stored
as a JSON-able dict; ``learn`` builds the pairs and picks the learner."""

from __future__ import annotations

import math

import numpy as np

LEARNERS = ("ridge", "gbt", "finet")


class LearnError(ValueError):
    """Not enough or unusable data to fit or apply a model (message says what to do)."""


def torch_available() -> bool:
    """Whether the FI-Net learner can run (torch importable)."""
    return _torch() is not None


def _scaler(X: np.ndarray) -> dict:
    mu = X.mean(axis=0)
    sd = X.std(axis=0)
    sd[sd < 1e-12] = 1.0
    return {"mean": mu.tolist(), "std": sd.tolist()}


def _scale(X: np.ndarray, sc: dict) -> np.ndarray:
    return (X - np.asarray(sc["mean"])) / np.asarray(sc["std"])


def _ridge_solve(Z: np.ndarray, y: np.ndarray, lam: float) -> tuple[np.ndarray, float]:
    b0 = float(y.mean())
    A = Z.T @ Z + lam * np.eye(Z.shape[1])
    return np.linalg.solve(A, Z.T @ (y - b0)), b0


def _fit_ridge(X, y, groups, seed: int) -> dict:
    """Ridge on standardized features; the penalty chosen by grouped 4-fold CV (folds
    hold whole target configurations)."""
    sc = _scaler(X)
    Z = _scale(X, sc)
    uniq = sorted(set(groups), key=repr)
    rng = np.random.default_rng(seed)
    fold_of = {g: int(f) for g, f in zip(uniq, rng.integers(0, 4, len(uniq)), strict=True)}
    folds = np.array([fold_of[g] for g in groups])
    best = (math.inf, 1.0)
    for lam in (1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0):
        err = []
        for f in range(4):
            tr, te = folds != f, folds == f
            if not te.any() or not tr.any():
                continue
            w, b0 = _ridge_solve(Z[tr], y[tr], lam)
            err.append(np.mean(np.abs(np.expm1(Z[te] @ w + b0 - y[te]))))
        e = float(np.mean(err)) if err else 0.0
        if e < best[0]:
            best = (e, lam)
    w, b0 = _ridge_solve(Z, y, best[1])
    return {"scaler": sc, "coef": w.tolist(), "intercept": b0, "lambda": best[1]}


def _ridge_predict(m: dict, X: np.ndarray) -> np.ndarray:
    return _scale(X, m["scaler"]) @ np.asarray(m["coef"]) + m["intercept"]


def _fit_gbt(X, y, seed: int, rounds: int = 300, depth: int = 3, lr: float = 0.05,
             min_leaf: int = 8, subsample: float = 0.8, n_bins: int = 32) -> dict:  # fmt: skip
    """Gradient-boosted regression trees on squared error: each tree (``depth`` levels,
    splits at feature quantiles, leaves of at least ``min_leaf`` pairs) fits the residual of
    the trees before it on a random ``subsample`` of the pairs, shrunk by ``lr``."""
    rng = np.random.default_rng(seed)
    n, d = X.shape
    qs = np.linspace(0, 1, n_bins + 1)[1:-1]
    edges = [np.unique(np.quantile(X[:, j], qs)) for j in range(d)]
    B = np.stack([np.searchsorted(e, X[:, j], side="right") for j, e in enumerate(edges)], 1)
    base = float(y.mean())
    pred = np.full(n, base)
    trees = []
    for _ in range(rounds):
        r = y - pred
        rows = rng.random(n) < subsample
        feat, thr, left, right, val = [], [], [], [], []

        def build(idx, level, feat=feat, thr=thr, left=left, right=right, val=val, r=r):
            node = len(feat)
            feat.append(-1), thr.append(0.0), left.append(-1), right.append(-1)
            val.append(float(r[idx].mean()) if len(idx) else 0.0)
            if level == depth or len(idx) < 2 * min_leaf:
                return node
            g, tot_c, tot_s = r[idx], len(idx), float(r[idx].sum())
            best = (1e-12 + tot_s**2 / tot_c, -1, -1)
            for j in range(d):
                nb = len(edges[j]) + 1
                cc = np.cumsum(np.bincount(B[idx, j], minlength=nb))[:-1]
                cs = np.cumsum(np.bincount(B[idx, j], weights=g, minlength=nb))[:-1]
                ok = (cc >= min_leaf) & (tot_c - cc >= min_leaf)
                if not ok.any():
                    continue
                sse = cs**2 / np.maximum(cc, 1) + (tot_s - cs) ** 2 / np.maximum(tot_c - cc, 1)
                gain = np.where(ok, sse, -np.inf)
                b = int(np.argmax(gain))
                if gain[b] > best[0]:
                    best = (float(gain[b]), j, b)
            if best[1] < 0:
                return node
            j, b = best[1], best[2]
            feat[node], thr[node] = j, float(edges[j][b])
            go_left = B[idx, j] <= b
            left[node] = build(idx[go_left], level + 1)
            right[node] = build(idx[~go_left], level + 1)
            return node

        build(np.flatnonzero(rows), 0)
        tree = {"feat": feat, "thr": thr, "left": left, "right": right, "val": val}
        trees.append(tree)
        pred += lr * _tree_predict(tree, X)
    return {"base": base, "lr": lr, "trees": trees}


def _tree_predict(tree: dict, X: np.ndarray) -> np.ndarray:
    feat, thr = np.asarray(tree["feat"]), np.asarray(tree["thr"])
    left, right, val = np.asarray(tree["left"]), np.asarray(tree["right"]), np.asarray(tree["val"])
    node = np.zeros(len(X), dtype=np.int64)
    while True:
        f = feat[node]
        inner = f >= 0
        if not inner.any():
            return val[node]
        x = X[np.arange(len(X)), np.where(inner, f, 0)]
        nxt = np.where(x < thr[node], left[node], right[node])
        node = np.where(inner, nxt, node)


def _gbt_predict(m: dict, X: np.ndarray) -> np.ndarray:
    out = np.full(len(X), m["base"])
    for t in m["trees"]:
        out += m["lr"] * _tree_predict(t, X)
    return out


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def _finet_module(torch, n_features: int, width: int = 16, modes: int = 6, blocks: int = 2):
    """FI-Net style: the feature vector as a 1-D signal of ``width`` channels; each block
    runs three branches side by side (Inception): a Fourier layer (FFT over the feature
    axis, ``modes`` learned complex mixing matrices, inverse FFT), a 1x1 and a 3-wide
    convolution; concatenated, mixed back to ``width`` channels, GELU, residual."""
    nn = torch.nn

    class Fourier(nn.Module):
        def __init__(self):
            super().__init__()
            scale = 1.0 / (width * width)
            self.m = min(modes, n_features // 2 + 1)
            self.w = nn.Parameter(scale * torch.randn(width, width, self.m, 2))

        def forward(self, x):
            f = torch.fft.rfft(x, dim=-1)
            w = torch.view_as_complex(self.w)
            out = torch.zeros_like(f)
            out[..., : self.m] = torch.einsum("bim,iom->bom", f[..., : self.m], w)
            return torch.fft.irfft(out, n=x.shape[-1], dim=-1)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fourier = Fourier()
            self.point = nn.Conv1d(width, width, 1)
            self.local = nn.Conv1d(width, width, 3, padding=1)
            self.mix = nn.Conv1d(3 * width, width, 1)

        def forward(self, x):
            b = torch.cat([self.fourier(x), self.point(x), self.local(x)], dim=1)
            return x + torch.nn.functional.gelu(self.mix(b))

    class FINet(nn.Module):
        def __init__(self):
            super().__init__()
            self.lift = nn.Conv1d(2, width, 1)  # value and a learned position channel
            self.pos = nn.Parameter(0.1 * torch.randn(1, 1, n_features))
            self.blocks = nn.Sequential(*[Block() for _ in range(blocks)])
            self.head = nn.Sequential(nn.Flatten(), nn.Linear(width * n_features, 32),
                                      nn.GELU(), nn.Linear(32, 1))  # fmt: skip

        def forward(self, z):
            x = torch.cat([z[:, None, :], self.pos.expand(z.shape[0], 1, -1)], dim=1)
            return self.head(self.blocks(self.lift(x)))[:, 0]

    return FINet()


def _fit_finet(X, y, seed: int, steps: int = 300) -> dict:
    torch = _torch()
    if torch is None:
        raise LearnError("finet needs torch: pip install ailens[learn]")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small: one thread is fastest and leaves the cores alone
    try:
        torch.manual_seed(seed)
        sc = _scaler(X)
        Z = torch.tensor(_scale(X, sc), dtype=torch.float32)
        y_mu, y_sd = float(y.mean()), float(y.std() or 1.0)
        T = torch.tensor((y - y_mu) / y_sd, dtype=torch.float32)
        net = _finet_module(torch, X.shape[1])
        opt = torch.optim.AdamW(net.parameters(), lr=3e-3, weight_decay=1e-3)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
        bs = min(256, len(T))
        g = torch.Generator().manual_seed(seed)
        for _ in range(steps):  # a fixed budget of optimiser steps on random mini-batches
            idx = torch.randint(0, len(T), (bs,), generator=g)
            opt.zero_grad()
            loss = torch.nn.functional.smooth_l1_loss(net(Z[idx]), T[idx], beta=0.5)
            loss.backward()
            opt.step()
            sched.step()
        state = {k: v.detach().cpu().numpy().tolist() for k, v in net.state_dict().items()}
    finally:
        torch.set_num_threads(threads)
    return {"scaler": sc, "y_mean": y_mu, "y_std": y_sd, "state": state,
            "n_features": X.shape[1], "steps": steps}  # fmt: skip


def _finet_predict(m: dict, X: np.ndarray) -> np.ndarray:
    torch = _torch()
    if torch is None:
        raise LearnError("this model is an FI-Net: it needs torch (pip install ailens[learn])")
    net = _finet_module(torch, int(m["n_features"]))
    net.load_state_dict({k: torch.tensor(v) for k, v in m["state"].items()})
    net.eval()
    with torch.no_grad():
        out = net(torch.tensor(_scale(X, m["scaler"]), dtype=torch.float32)).numpy()
    return out.astype(np.float64) * m["y_std"] + m["y_mean"]


def fit_learner(name: str, X, y, groups, seed: int = 0, *, finet_steps: int = 300) -> dict:
    """Fit one learner on pairs (X, log residual y); ``groups`` are the target
    configurations (ridge's CV folds)."""
    if name == "ridge":
        return {"learner": "ridge", **_fit_ridge(X, y, groups, seed)}
    if name == "gbt":
        return {"learner": "gbt", **_fit_gbt(X, y, seed)}
    if name == "finet":
        return {"learner": "finet", **_fit_finet(X, y, seed, finet_steps)}
    raise LearnError(f"unknown learner {name!r}: choose from {', '.join(LEARNERS)}")


def predict_residual(m: dict, X: np.ndarray) -> np.ndarray:
    """Log residual over the analytic model (0 for the analytic learner)."""
    kind = m.get("learner")
    if kind == "analytic":
        return np.zeros(len(X))
    if kind == "ridge":
        return _ridge_predict(m, X)
    if kind == "gbt":
        return _gbt_predict(m, X)
    if kind == "finet":
        return _finet_predict(m, X)
    raise LearnError(f"unknown learner {kind!r} in the model file; fit it again")

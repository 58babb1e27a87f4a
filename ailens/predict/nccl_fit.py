"""The NCCL cost model's fit on nccl-tests tables: a platform whose links and protocol
corrections reproduce the measured times (``fit_platform``)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from .nccl import SATURATION_MIN_BYTES, busbw_factor, nccl_collective_s
from .nccl_table import NcclTestsTable
from .platforms import NCCL_NET_STEP_S, Link, Platform

__all__ = ["fit_platform"]


def _nelder_mead(f, x0: np.ndarray, step: float = 0.3, iters: int = 1500) -> np.ndarray:
    """Minimise ``f`` from ``x0`` (a small, dependency-free Nelder-Mead)."""
    k = len(x0)
    pts = [np.array(x0, dtype=float)]
    for i in range(k):
        x = np.array(x0, dtype=float)
        x[i] += step
        pts.append(x)
    vals = [f(x) for x in pts]
    for _ in range(iters):
        order = np.argsort(vals)
        pts = [pts[i] for i in order]
        vals = [vals[i] for i in order]
        if abs(vals[-1] - vals[0]) <= 1e-10 * (abs(vals[0]) + 1e-12):
            break
        c = np.mean(pts[:-1], axis=0)
        xr = c + (c - pts[-1])
        fr = f(xr)
        if fr < vals[0]:
            xe = c + 2 * (c - pts[-1])
            fe = f(xe)
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            xc = c + 0.5 * (pts[-1] - c)
            fc = f(xc)
            if fc < vals[-1]:
                pts[-1], vals[-1] = xc, fc
            else:
                for i in range(1, len(pts)):
                    pts[i] = pts[0] + 0.5 * (pts[i] - pts[0])
                    vals[i] = f(pts[i])
    return pts[int(np.argmin(vals))]


def _rows(tables: list[NcclTestsTable]):
    """(table, size, seconds) of every usable row: 2 ranks or more, positive times."""
    out = []
    for t in tables:
        if t.ranks < 2:
            continue
        for i, s in enumerate(t.sizes):
            sec = t.seconds(i)
            if s > 0 and sec > 0:
                out.append((t, s, sec))
    return out


# Protocol corrections the fit may change: (protocol, "latency" | "bandwidth"). LL's latency
# and Simple's bandwidth are the link figures themselves.
_TUNABLE = (("LL", "bandwidth"), ("LL128", "base_latency"), ("Simple", "base_latency"))


_PULL = 1e-6  # weight of the protocol corrections' distance from NCCL's constants (log)
# Sizes whose time is latency alone on every platform measured (the bandwidth term is < 2 %):
# they fit the latencies first.
_PURE_LATENCY_BYTES = 8 << 10


def _size_class(nbytes: float) -> int:
    """Latency-bound (<= 64 KiB), middle, bandwidth-bound (>= 64 MiB): each class of each
    table weighs the same in the fit, whatever its number of rows."""
    return 0 if nbytes <= 64 << 10 else (2 if nbytes >= 64 << 20 else 1)


def fit_platform(tables: list[NcclTestsTable], base: Platform, name: str | None = None):
    """The platform whose NCCL model best explains the tables (see the module docstring):
    least squares on log time, each size class of each table weighted alike."""
    rows = _rows(tables)
    if not rows:
        raise ValueError(
            "no nccl-tests row with 2 or more ranks: a 1-rank run moves no data, nothing to fit"
        )
    dpn = base.devices_per_node
    for t in tables:
        if t.nodes == 1 and t.ranks > dpn:
            raise ValueError(
                f"{t.source}: {t.ranks} ranks on one host but devices_per_node={dpn}; "
                "give --devices-per-node"
            )
    fit = _Fit(tables, rows, base)
    x, done = fit.search()
    fitted = _sources(fit.build(x), base, done, fit.fitted_by)
    return replace(
        fitted,
        busbw_by_devices={**base.busbw_by_devices, **_saturated_busbw(tables)},
        name=name or base.name,
        description=(base.description or "") + f"; {fit.fitted_by}",
        notes=tuple(fit.notes(fitted, math.sqrt(fit.loss(x)))),
    )


def _saturated_busbw(tables: list[NcclTestsTable]) -> dict[int, float]:
    """{devices on one node: the bus bandwidth of the largest message}, from the one-node
    all-reduce tables that reach the bandwidth band (the best table where several)."""
    out: dict[int, float] = {}
    for t in tables:
        if t.nodes != 1 or t.ranks < 2 or t.op != "allreduce" or not t.sizes:
            continue
        i = max(range(len(t.sizes)), key=lambda j: t.sizes[j])
        size, sec = t.sizes[i], t.seconds(i)
        if size >= SATURATION_MIN_BYTES and sec > 0:
            bus = size / sec * busbw_factor("allreduce", t.ranks)
            out[t.ranks] = max(out.get(t.ranks, 0.0), bus)
    return out


class _Fit:
    """The fit's parameters (log values, named), their start (the base platform's), the
    rows' weights, the platform a parameter vector gives and its loss."""

    def __init__(self, tables: list[NcclTestsTable], rows: list, base: Platform):
        self.rows, self.base = rows, base
        self.dpn = base.devices_per_node
        self.where = where = ", ".join(sorted({t.source for t in tables}))
        one_node = sorted({t.ranks_per_node for t in tables if t.nodes == 1})
        multi = [t for t in tables if t.nodes > 1]
        self.multi = bool(multi)
        self.network_nodes = max((t.nodes for t in multi), default=0)
        # Only multi-node logs: the intra-node link cannot be told from the network's; kept.
        self.fit_intra = fit_intra = bool(one_node)
        counts = sorted(set(one_node) | {t.ranks_per_node for t in multi if t.ranks_per_node > 1})
        self.counts = counts
        # A log run with -g N (one thread, N devices) pays N kernel launches one after
        # another. With only such logs the launches and the intra-node step latency grow
        # alike with the devices (N - 1 against 2(N - 1)): the step latency then stays the
        # base platform's.
        self.single = single = any(t.devices_per_process > 1 for t in tables)
        step_known = any(t.devices_per_process == 1 and t.ranks_per_node > 1 for t in tables)
        self.fit_step = fit_step = fit_intra and (step_known or not single)
        names: list[str] = ["base"]
        x0: list[float] = [math.log(base.base_latency_s)]
        if single:
            names.append("launch")
            x0.append(math.log(max(base.launch_s, 2e-6)))
        if fit_step:
            names.append("intra_lat")
            x0.append(math.log(max(base.intra.latency_s, 1e-9)))
        if fit_intra:
            names += [f"bw{k}" for k in counts]
            x0 += [math.log(base.intra_bandwidth(k)[0]) for k in counts]
        net = base.network or Link(12.5e9, NCCL_NET_STEP_S, "assumed starting point")
        if multi:
            names += ["net_lat", "net_bw"]
            x0 += [math.log(max(net.latency_s, 1e-9)), math.log(net.bandwidth_Bps)]
        for k in counts:
            for proto, what in _TUNABLE:
                names.append(f"{k}:{proto}.{what}")
                x0.append(math.log(float(base.protocol_tuning(k, proto).get(what, 1.0))))
        x0 = np.array(x0)
        meas = np.log(np.array([r[2] for r in rows], dtype=float))
        groups: dict[tuple[str, int], int] = {}
        for t, s, _ in rows:
            key = (t.source, _size_class(s))
            groups[key] = groups.get(key, 0) + 1
        weight = np.array([1.0 / groups[(t.source, _size_class(s))] for t, s, _ in rows])
        weight /= weight.sum()
        fitted_by = f"fitted on {where}"
        self.names, self.x0, self.net = names, x0, net
        self.meas, self.weight, self.fitted_by = meas, weight, fitted_by
        self.classes = np.array([_size_class(s) for _, s, _ in rows])
        self.tunables = np.array([":" in n for n in names])

    def build(self, x: np.ndarray) -> Platform:
        """The platform of the parameters ``x``."""
        base, names, counts, fitted_by = self.base, self.names, self.counts, self.fitted_by
        single, fit_intra, fit_step, multi = self.single, self.fit_intra, self.fit_step, self.multi
        dpn = self.dpn
        v = dict(zip(names, np.exp(x), strict=True))
        kw: dict = {"base_latency_s": float(v["base"]), "base_latency_source": fitted_by}
        if single:
            kw["launch_s"] = float(v["launch"])
        if fit_intra:
            kw["intra_by_devices"] = {k: float(v[f"bw{k}"]) for k in counts}
            top = max(counts)
            lat = float(v["intra_lat"]) if fit_step else base.intra.latency_s
            kw["intra"] = Link(float(v[f"bw{top}"]), lat, fitted_by)  # sources: _sources
        if multi:
            kw["network"] = Link(float(v["net_bw"]), float(v["net_lat"]), fitted_by)
            kw["nics_per_node"] = base.nics_per_node or dpn
            kw["network_nodes"] = self.network_nodes
        per: dict = {}
        for k in counts:
            for proto, what in _TUNABLE:
                per.setdefault(k, {}).setdefault(proto, {"base_latency": 1.0, "bandwidth": 1.0})[
                    what
                ] = float(v[f"{k}:{proto}.{what}"])
        kw["protocols_by_devices"] = per
        return replace(base, **kw)

    def loss(self, x: np.ndarray, only: np.ndarray | None = None) -> float:
        rows, weight, meas, x0, tunables = self.rows, self.weight, self.meas, self.x0, self.tunables
        if np.any(np.abs(x - x0) > 12):
            return 1e9
        p = self.build(x)
        use = range(len(rows)) if only is None else np.flatnonzero(only)
        err = 0.0
        for i in use:
            t, s, _ = rows[i]
            pred = nccl_collective_s(
                t.op, s, t.ranks, p, t.ranks_per_node, devices_per_process=t.devices_per_process
            ).seconds
            err += weight[i] * (math.log(pred) - meas[i]) ** 2
        # A protocol the rows never see choose would drift where it does not matter here but
        # does at another count: a slight pull towards NCCL's own constants.
        return err + _PULL * float(np.sum((x[tunables] - x0[tunables]) ** 2))

    def search(self) -> tuple[np.ndarray, set[str]]:
        """The fitted parameters, and the names of those some row informed."""
        rows, names, counts, classes = self.rows, self.names, self.counts, self.classes
        loss = self.loss
        # In stages, each on the rows that decide it: the latencies on the sizes that are
        # latency alone, the bandwidths on the bandwidth-bound ones, the protocol corrections
        # on the rest. (A joint search from there trades the latency rows for the middle ones.)
        x = self.x0.copy()
        tiny = np.array([s <= _PURE_LATENCY_BYTES for _, s, _ in rows])
        per_node = np.array([t.ranks_per_node for t, _, _ in rows])
        stages = [
            (("base", "launch", "intra_lat", "net_lat"), tiny),
            (tuple(n for n in names if n.startswith("bw")) + ("net_bw",), classes == 2),
        ] + [
            (tuple(f"{k}:{p}.{w}" for p, w in _TUNABLE), ~tiny & (classes < 2) & (per_node == k))
            for k in counts
        ]
        # A figure no row informs keeps the base platform's value (and its source).
        multi_row = np.array([t.nodes > 1 for t, _, _ in rows])
        informs = {
            "launch": tiny & np.array([t.devices_per_process > 1 for t, _, _ in rows]),
            "intra_lat": tiny & (per_node > 1),
            "net_lat": tiny & multi_row,
            "net_bw": (classes == 2) & multi_row,
        }
        informs.update({f"bw{k}": (classes == 2) & (per_node == k) for k in counts})
        done: set[str] = set()
        for wanted, only in stages:
            idx = [
                i
                for i, n in enumerate(names)
                if n in wanted and (only & informs.get(n, only)).any()
            ]
            if not idx:
                continue
            done.update(names[i] for i in idx)

            def sub(y: np.ndarray, idx=idx, only=only) -> float:
                z = x.copy()
                z[idx] = y
                return loss(z, only)

            # Several starts (the latencies trade off against each other: local minima).
            starts = [x[idx]] + [x[idx] + d for d in (-1.5, 1.0) if len(idx) > 1]
            best = min((_nelder_mead(sub, y, iters=400) for y in starts), key=sub)
            x[idx] = best
        return x, done

    def notes(self, fitted: Platform, rms: float) -> list[str]:
        """What the fit did and kept."""
        base, where, rows = self.base, self.where, self.rows
        single, fit_intra, fit_step, multi = self.single, self.fit_intra, self.fit_step, self.multi
        notes = list(base.notes) + [
            f"fitted on {len(rows)} rows of {where}: weighted RMS error "
            f"{100 * (math.exp(rms) - 1):.1f} % (log scale)"
        ]
        if single:
            notes.append(
                "logs run with one thread driving several devices (-g N): "
                f"{fitted.launch_s * 1e6:.3g} us per extra device's kernel launch fitted, not "
                "part of a job's collectives"
            )
        if fit_intra and not fit_step:
            notes.append(
                "every one-node log drives all devices from one thread: the intra-node step "
                f"latency cannot be told from the launches, kept from {base.name} "
                f"({base.intra.source})"
            )
        if not fit_intra:
            notes.append(
                f"no one-node log: intra-node link kept from {base.name} ({base.intra.source})"
            )
        if not multi and fitted.network is not None:
            notes.append(
                f"no multi-node log: network kept from {base.name} ({fitted.network.source})"
            )
        return notes


def _sources(p: Platform, base: Platform, done: set[str], fitted_by: str) -> Platform:
    """Say, per figure, whether it was fitted or kept from the base platform."""

    def what(bw: bool, lat: bool, kept: Link | None) -> str:
        if bw and lat:
            return fitted_by
        keep = kept.source if kept is not None else "assumed starting point"
        if bw:
            return f"bandwidth {fitted_by}; latency kept: {keep}"
        if lat:
            return f"latency {fitted_by}; bandwidth kept: {keep}"
        return keep

    kw: dict = {}
    if p.intra is not base.intra:
        bw = any(n.startswith("bw") for n in done)
        kw["intra"] = replace(p.intra, source=what(bw, "intra_lat" in done, base.intra))
    if p.network is not None and p.network is not base.network:
        kw["network"] = replace(
            p.network, source=what("net_bw" in done, "net_lat" in done, base.network)
        )
    if "base" not in done:
        kw["base_latency_source"] = base.base_latency_source
    return replace(p, **kw)

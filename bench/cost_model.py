#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Alpha-beta cost model of kolo's coordinator round and small-op latency, fitted to the
measurements of bench/scaling.py (its scaling.csv), and its prediction at large rank counts on
a cluster with a core per rank, for the old round (ring), the new one (recursive doubling +
binomial tree) and main's (new + tree gather + small allreduces carried in the round).

    /usr/bin/python3 bench/cost_model.py build/scaling/scaling.csv
    /usr/bin/python3 bench/cost_model.py RESULTS.csv --cores 64 --ranks 64,256,1024 --alpha-us 20

The fit has two parts, fitted one after the other, each with its own error report:

1. Core part, fitted only to the runs with np <= cores (--cores: the cores of the machine that
   measured; default the csv's cores column, else this machine's), where every rank has a core,
   as on a cluster:
     t = gamma + alpha_p2p * S_p2p + alpha_gloo * S_gloo + beta * B.
   S_p2p are sequential message steps of kolo's own algorithms (point-to-point through kolo's
   Transport, completed by polling with backoff: transport/poll_support.h), S_gloo steps inside
   Gloo's own collectives (blocking waits woken by Gloo's I/O thread); the two kinds of step
   cost differently, so each has its alpha. B are the bytes the critical path sends (ring and
   halving-doubling reductions move 2(N-1)/N of the buffer, recursive doubling log2(N) times the
   buffer). gamma is a fixed software cost per call: gamma_coll for a bare collective
   (kolo-bench rows, Gloo called directly), gamma_rt for one op through the runtime (queue,
   coordinator wake-up, handle completion). The predictions use this part alone.
2. Oversubscription part, fitted to the runs with np > cores (s = np / cores ranks share each
   core, so a rank waits for a core, not for the network), on top of the fixed core part:
     t = core + (s - 1) * (omega_sync * S_sync + omega_call * calls + omega_bytes * B).
   S_sync are butterfly steps, in which every rank exchanges with a new partner (kolo's and
   Gloo's recursive doubling and halving-doubling, the control round's recursive doubling):
   each such step waits for the partner's time slice. Ring steps (kolo's ring, Gloo's ring and
   native allreduce) depend on one neighbour only and count 0; so do kolo's halving-doubling
   steps when the buffer has fewer elements than ranks (ops/halving_doubling.cc skips the empty
   chunks, leaving a tree of single messages). calls: one per collective or runtime op (every
   rank must be scheduled once to start it). omega_bytes: reductions and copies of all ranks
   share the cores. This part only explains this machine's figures; it is not extrapolated.

Both parts are least squares on the relative error (every point weighs alike whether it is 50 us
or 50 ms), parameters >= 0; each prints its rms and max relative error, overall and per series.
A part whose data has fewer distinct rank counts than parameters is fitted with a WARNING (on
stdout and stderr, and in --json): its N-dependence is then the model's assumption, not a
measurement. A core part with fewer points than parameters, or none (no run with np <= cores),
is refused (exit status 1); such an oversubscription part is left out with a WARNING. The
predictions come with their range when any one series is left out of the core fit.

Message patterns, as in core/coordinator.cc and ops/select.cc (all control traffic is kolo p2p):
  cached round, new:  the bit vector (2 flag bytes + KOLO_CACHE_CAPACITY bytes) by
                      ops::controlAllreduce = recursive doubling: log2 N steps of V bytes;
  cached round, old:  the same vector by the ring allreduce: 2(N-1) steps of V/N bytes;
  full round:         cached round + request gather into rank 0 (a length, then the list,
                      from each of the N-1 others: counted as N-1 sequential receives per
                      exchange, an upper bound -- on a network they overlap in flight) + the
                      response broadcast (length, then list): new ops::controlBroadcast =
                      binomial tree, ceil(log2 N) steps each; old ops::broadcast(kRing) =
                      chain, N-1 steps each;
  rounds:             each control collective also pays gamma_coll (1 cached; 5 full, 4 main);
  4-byte op:          gamma_rt + one cached round (KOLO_TIMELINE_MARK_CYCLES: 211 rounds for
                      209 ops at np 4) + the data allreduce, which ops/select.cc gives to
                      Gloo's native ring below 4 KiB on Gloo: 2(N-1) Gloo steps (old, new);
  main:               new + ops::binomialGatherv for the requests (ceil(log2 N) steps, N-1
                      records reach rank 0) + core/piggyback: a small cached allreduce rides in
                      the round's recursive doubling, so the 4-byte op is gamma_rt + the round.
The runtime's measured points use the design in scaling.csv's runtime_design column ("new" when
absent).
"""

import argparse
import csv
import itertools
import json
import math
import os
import sys

KOLO_ALGORITHMS = ("ring", "recursive_doubling", "halving_doubling")  # kolo p2p
GLOO_ALGORITHMS = ("native", "gloo_ring", "gloo_hd")  # inside Gloo
ELEMENT_BYTES = 4  # float32, as kolo-bench and kolo-runtime-bench measure
# feature -> fitted parameter of the core part (us per unit of the feature)
PARAMS = [("p2p", "alpha_p2p_us"), ("gloo", "alpha_gloo_us"), ("bytes", "beta_us_per_byte"),
          ("coll", "gamma_coll_us"), ("rt", "gamma_rt_us")]
# feature -> parameter of the oversubscription part (us per unit of the feature per (s - 1))
OVER_PARAMS = [("sync", "omega_sync_us"), ("call", "omega_call_us"),
               ("bytes", "omega_bytes_us_per_byte")]


def rd_steps(n):
    """Recursive doubling's steps: log2 N, plus a fold in and out for a non-power of two."""
    p = int(math.floor(math.log2(n)))
    return p if (1 << p) == n else p + 2


def tree_steps(n):
    return int(math.ceil(math.log2(n))) if n > 1 else 0


def steps(algo, n):
    if algo in ("recursive_doubling",):
        return rd_steps(n)
    if algo in ("halving_doubling", "gloo_hd"):
        return 2 * rd_steps(n)
    return 2 * (n - 1)  # ring, native (Gloo's ring), gloo_ring


def sync_steps(algo, n, size):
    """Butterfly steps (every rank exchanges with a new partner) of one allreduce: what a rank
    waits for when ranks share cores. Ring-like algorithms wait on one neighbour: 0."""
    if algo == "recursive_doubling":
        return rd_steps(n)
    if algo == "gloo_hd":  # Gloo notifies the partner in every step, whatever the count
        return steps(algo, n)
    if algo == "halving_doubling":  # kolo skips empty chunks: below N elements, a tree
        return steps(algo, n) if size // ELEMENT_BYTES >= n else 0
    return 0


def collective(algo, n, size):
    """Features of one bare allreduce of `size` bytes with `algo`."""
    kind = "p2p" if algo in KOLO_ALGORITHMS else "gloo"
    b = rd_steps(n) * size if algo == "recursive_doubling" else 2.0 * (n - 1) / n * size
    return {kind: steps(algo, n), "bytes": b, "coll": 1, "sync": sync_steps(algo, n, size)}


def add(*feats):
    out = {}
    for f in feats:
        for k, v in f.items():
            out[k] = out.get(k, 0) + v
    return out


# ---- the designs ------------------------------------------------------------------------------
DESIGNS = ("old", "new", "main")


def cached_round(design, n, view):
    """One round whose ops are all in the response cache: the bit-vector allreduce (with "main",
    a 4-byte op's payload rides in it: 8 more bytes)."""
    if design == "old":
        return {"p2p": 2 * (n - 1), "bytes": 2.0 * (n - 1) / n * view, "coll": 1, "sync": 0}
    extra = 8 if design == "main" else 0
    return {"p2p": rd_steps(n), "bytes": rd_steps(n) * (view + extra), "coll": 1,
            "sync": rd_steps(n)}


def full_round(design, n, view, request, response):
    """A round that negotiates: + gather into rank 0 + two broadcasts of the response list."""
    if design == "main":  # ops::binomialGatherv: ceil(log2 N) steps, N-1 records reach rank 0
        gather = {"p2p": tree_steps(n), "bytes": (n - 1) * (12 + request), "coll": 1}
    else:  # direct: a length, then the list, from each of the N-1 others
        gather = {"p2p": 2 * (n - 1), "bytes": (n - 1) * (8 + request), "coll": 2}
    hops = (n - 1) if design == "old" else tree_steps(n)  # chain vs binomial tree
    bcast = {"p2p": 2 * hops, "bytes": hops * (8 + response), "coll": 2}
    return add(cached_round(design, n, view), gather, bcast)


def small_op(design, n, view, rd_data=False):
    """A cached 4-byte allreduce through the runtime (its collectives' gammas are in gamma_rt).
    old / new: the round, then Gloo's ring for the data (or kolo's RD with rd_data); main: the
    data rides in the round (core/piggyback, KOLO_CONTROL_PIGGYBACK_BYTES)."""
    if design == "main":
        f = add(cached_round(design, n, view), {"rt": 1})
    else:
        data = collective("recursive_doubling" if rd_data else "native", n, 4)
        f = add(cached_round(design, n, view), data, {"rt": 1})
    f["coll"] = 0
    return f


def feature(f, key):
    if key == "call":  # a collective or a runtime op: every rank starts it once
        return f.get("coll", 0) + f.get("rt", 0)
    return f.get(key, 0)


def predict(par, feats):
    """The core part: one core per rank."""
    return sum(par[name] * feats.get(key, 0) for key, name in PARAMS)


def share(n, cores):
    """s - 1 of the oversubscription term: 0 while every rank has a core."""
    return max(0.0, float(n) / cores - 1.0)


def predict_machine(par, over, feats, n, cores):
    """Core part + the oversubscription term on a machine with `cores` cores."""
    t = predict(par, feats)
    if over:
        t += share(n, cores) * sum(over[name] * feature(feats, key) for key, name in OVER_PARAMS)
    return t


# ---- points from scaling.csv ------------------------------------------------------------------
def num(text):
    try:
        v = float(text)
        return v if v > 0 else None
    except (TypeError, ValueError):
        return None


def points(rows, view):
    """(mode, label, n, features, measured us) for every measured figure."""
    out = []
    for r in rows:
        n, mode = int(r["np"]), r["mode"]
        large = int(r.get("large_bytes") or 0)
        for col, algo in (("gloo_ring_us", "gloo_ring"), ("gloo_hd_us", "gloo_hd"),
                          ("kolo_ring_us", "ring"), ("gloo_native_us", "native")):
            t = num(r.get(col))
            if t is not None:
                out.append((mode, "4 B %s (runtime-bench)" % algo, n, collective(algo, n, 4), t))
        for size, nbytes in (("small", 4), ("large", large)):
            for algo in KOLO_ALGORITHMS + GLOO_ALGORITHMS:
                t = num(r.get("kb_%s_%s_us" % (size, algo)))
                if t is not None and nbytes > 0:
                    out.append((mode, "%d B %s (kolo-bench)" % (nbytes, algo), n,
                                collective(algo, n, nbytes), t))
        t = num(r.get("runtime_us"))
        if t is not None:
            design = r.get("runtime_design") or "new"
            out.append((mode, "4 B op through the runtime (%s)" % design, n,
                        small_op(design, n, view), t))
    return out


# ---- non-negative least squares (few unknowns: every subset, the best) ------------------------
def solve(a, y):
    """Least squares a x = y by the normal equations (tiny ridge for rank deficiency)."""
    k = len(a[0])
    m = [[sum(r[i] * r[j] for r in a) for j in range(k)] for i in range(k)]
    v = [sum(r[i] * yy for r, yy in zip(a, y)) for i in range(k)]
    for i in range(k):
        m[i][i] += 1e-12 * (m[i][i] or 1.0)
    for c in range(k):  # Gauss-Jordan with partial pivoting
        p = max(range(c, k), key=lambda i: abs(m[i][c]))
        m[c], m[p], v[c], v[p] = m[p], m[c], v[p], v[c]
        if abs(m[c][c]) < 1e-300:
            return None
        for i in range(k):
            if i != c:
                f = m[i][c] / m[c][c]
                m[i] = [x - f * z for x, z in zip(m[i], m[c])]
                v[i] -= f * v[c]
    return [v[i] / m[i][i] for i in range(k)]


def nnls(rows, y):
    """min sum((rows . x - y)^2) with x >= 0; columns that are all zero stay 0."""
    k = len(rows[0])
    scale = [max(abs(r[j]) for r in rows) for j in range(k)]
    best = (sum(v * v for v in y), [0.0] * k)
    for size in range(1, k + 1):
        for subset in itertools.combinations(range(k), size):
            if any(scale[j] == 0 for j in subset):
                continue  # no point measures this parameter
            x = solve([[r[j] / scale[j] for j in subset] for r in rows], y)
            if x is None or min(x) < 0:
                continue
            full = [0.0] * k
            for j, xv in zip(subset, x):
                full[j] = xv / scale[j]
            err = sum((sum(f * p for f, p in zip(r, full)) - yy) ** 2 for r, yy in zip(rows, y))
            if err < best[0] - 1e-15:
                best = (err, full)
    return best[1]


def matrix_rank(rows, tol=1e-9):
    """Numerical rank of the (column-scaled) design matrix, by Gram-Schmidt on its columns."""
    if not rows:
        return 0
    cols = []
    for j in range(len(rows[0])):
        c = [r[j] for r in rows]
        s = max(abs(x) for x in c)
        if s > 0:
            cols.append([x / s for x in c])
    basis = []
    for c in cols:
        v = list(c)
        for b in basis:
            d = sum(x * y for x, y in zip(v, b))
            v = [x - d * y for x, y in zip(v, b)]
        norm = math.sqrt(sum(x * x for x in v))
        if norm > tol * math.sqrt(len(v)):
            basis.append([x / norm for x in v])
    return len(basis)


def fit(pts):
    """The core part: minimizes sum(((model - t) / t)^2) with every parameter >= 0."""
    keys = [k for k, _ in PARAMS]
    x = nnls([[f.get(k, 0) / t for k in keys] for _, _, _, f, t in pts], [1.0] * len(pts))
    return {name: v for (_, name), v in zip(PARAMS, x)}


def fit_over(pts, par, cores):
    """The oversubscription part on top of the fixed core part `par`."""
    rows = [[share(n, cores) * feature(f, k) / t for k, _ in OVER_PARAMS]
            for _, _, n, f, t in pts]
    x = nnls(rows, [1.0 - predict(par, f) / t for _, _, _, f, t in pts])
    return {name: v for (_, name), v in zip(OVER_PARAMS, x)}


def check_part(what, pts, keys, warnings):
    """Refusal text when the part is underdetermined; a WARNING when it has fewer distinct rank
    counts than parameters or parameters the data cannot tell apart."""
    used = [k for k in keys if any(feature(f, k) for _, _, _, f, _ in pts)]
    nps = sorted(set(p[2] for p in pts))
    if len(pts) < len(used):
        return "%s: %d points for %d parameters" % (what, len(pts), len(used))
    rank = matrix_rank([[feature(f, k) / t for k in used] for _, _, _, f, t in pts])
    if rank < len(used):
        warnings.append("%s: the points determine only %d of its %d parameters (%s); the fit "
                        "picks one of many equally good answers" % (what, rank, len(used),
                                                                     ", ".join(used)))
    if len(nps) < len(used):
        warnings.append("%s: %d distinct rank count%s (np %s) for %d parameters: the parameters "
                        "are told apart only by the algorithms' different step counts, and the "
                        "growth with N is the model's assumption, not a measurement"
                        % (what, len(nps), "" if len(nps) == 1 else "s",
                           ",".join(map(str, nps)), len(used)))
    return None


# ---- report -----------------------------------------------------------------------------------
def us(v):
    if v >= 1e6:
        return "%.2f s" % (v / 1e6)
    if v >= 1e3:
        return "%.1f ms" % (v / 1e3)
    return "%.0f us" % v


def errors(res):
    """(rms, max |.|, index of the max) of relative residuals."""
    rms = math.sqrt(sum(r * r for r in res) / len(res))
    worst = max(range(len(res)), key=lambda i: abs(res[i]))
    return rms, abs(res[worst]), worst


def cell(res):
    if not res:
        return "-"
    rms, mx, _ = errors(res)
    return "%.0f%% / %.0f%%" % (100 * rms, 100 * mx)


def report_fit(a, pts, modes, result, warnings):
    c = a.cores
    fits, overs = {}, {}
    print("## Core part: runs with np <= %d (the cores: one core per rank)\n" % c)
    print("t = gamma + alpha_p2p * kolo steps + alpha_gloo * Gloo steps + beta * bytes; least "
          "squares on the relative error, parameters >= 0. rms / max: relative error of the "
          "fit over its points.\n")
    print("| mode | points | np | alpha_p2p (us/step) | alpha_gloo (us/step) | beta (ns/B) | "
          "gamma_coll (us) | gamma_rt (us) | rms | max |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for mode in modes:
        core = [p for p in pts if p[0] == mode and p[2] <= c]
        par = fits[mode] = fit(core)
        res = [(predict(par, f) - t) / t for _, _, _, f, t in core]
        rms, mx, w = errors(res)
        print("| %s | %d | %s | %.1f | %.1f | %.3f | %.0f | %.0f | %.0f%% | %.0f%% (%s, np %d) |"
              % (mode, len(core), ",".join(map(str, sorted(set(p[2] for p in core)))),
                 par["alpha_p2p_us"], par["alpha_gloo_us"], par["beta_us_per_byte"] * 1e3,
                 par["gamma_coll_us"], par["gamma_rt_us"], 100 * rms, 100 * mx, core[w][1],
                 core[w][2]))
        result["fits"][mode] = dict(par, points=len(core), rms_relative_residual=rms,
                                    max_relative_residual=mx)

    over_modes = [m for m in modes if any(p[0] == m and p[2] > c for p in pts)]
    print("\n## Oversubscription part: runs with np > %d (s = np / %d ranks share a core)\n"
          % (c, c))
    if not over_modes:
        print("No run has more ranks than cores: nothing to fit.")
    else:
        print("t = core + (s - 1) * (omega_sync * butterfly steps + omega_call * calls + "
              "omega_bytes * bytes), the core part fixed; least squares on the relative error, "
              "parameters >= 0. It describes this machine and enters no prediction.\n")
        print("| mode | points | np | omega_sync (us/step) | omega_call (us) | omega_bytes (ns/B) "
              "| rms | max | rms, core part alone |")
        print("| --- | ---: | --- | ---: | ---: | ---: | ---: | --- | ---: |")
    for mode in over_modes:
        op = [p for p in pts if p[0] == mode and p[2] > c]
        why = check_part("%s oversubscription part" % mode, op, [k for k, _ in OVER_PARAMS],
                         warnings)
        if why:
            warnings.append(why + ": not fitted")
            continue
        ov = overs[mode] = fit_over(op, fits[mode], c)
        res = [(predict_machine(fits[mode], ov, f, n, c) - t) / t for _, _, n, f, t in op]
        rms, mx, w = errors(res)
        alone = errors([(predict(fits[mode], f) - t) / t for _, _, _, f, t in op])[0]
        print("| %s | %d | %s | %.1f | %.1f | %.3f | %.0f%% | %.0f%% (%s, np %d) | %.0f%% |"
              % (mode, len(op), ",".join(map(str, sorted(set(p[2] for p in op)))),
                 ov["omega_sync_us"], ov["omega_call_us"], ov["omega_bytes_us_per_byte"] * 1e3,
                 100 * rms, 100 * mx, op[w][1], op[w][2], 100 * alone))
        result["oversubscription"][mode] = dict(ov, points=len(op), rms_relative_residual=rms,
                                                max_relative_residual=mx,
                                                core_alone_rms_relative_residual=alone)

    def model(mode, n, f):
        return predict_machine(fits[mode], overs.get(mode), f, n, c)

    if overs:
        print("\nBoth parts together, every figure of the mode:")
        for mode in overs:
            mine = [p for p in pts if p[0] == mode]
            rms, mx, w = errors([(model(mode, n, f) - t) / t for _, _, n, f, t in mine])
            print("- %s: %d figures, rms %.0f%%, max %.0f%% (%s, np %d)"
                  % (mode, len(mine), 100 * rms, 100 * mx, mine[w][1], mine[w][2]))
            result["oversubscription"][mode].update(all_points=len(mine),
                                                    all_rms_relative_residual=rms,
                                                    all_max_relative_residual=mx)

    print("\n### Error per series: relative rms / max of the fit\n")
    print("| mode | figure | core part (np <= %d) | oversubscribed (np > %d) |" % (c, c))
    print("| --- | --- | ---: | ---: |")
    def labels_of(mode):
        """The mode's figure labels, in the order the CSV first gives them."""
        labels = []
        for p in pts:
            if p[0] == mode and p[1] not in labels:
                labels.append(p[1])
        return labels

    for mode in modes:
        for label in labels_of(mode):
            mine = [p for p in pts if p[0] == mode and p[1] == label]
            core = [(model(mode, n, f) - t) / t for _, _, n, f, t in mine if n <= c]
            over = [(model(mode, n, f) - t) / t for _, _, n, f, t in mine if n > c]
            over_cell = cell(over) if mode in overs or not over else "not fitted"
            print("| %s | %s | %s | %s |" % (mode, label, cell(core), over_cell))
            result["series"].append({"mode": mode, "label": label, "core_residuals": core,
                                     "oversubscribed_residuals": over})

    all_np = sorted(set(p[2] for p in pts))
    print("\n### Residuals: measured / model on this machine (us)\n")
    print("| mode | figure | " + " | ".join("np %d" % n for n in all_np) + " |")
    print("| --- | --- |" + " ---: |" * len(all_np))
    for mode in modes:
        for label in labels_of(mode):
            cells = []
            for n in all_np:
                m = [p for p in pts if p[0] == mode and p[1] == label and p[2] == n]
                cells.append("-" if not m else "%.0f / %.0f" % (m[0][4], model(mode, n, m[0][3])))
            print("| %s | %s | %s |" % (mode, label, " | ".join(cells)))
        result["fits"][mode]["residuals"] = [
            {"label": l, "np": n, "measured_us": t, "model_us": model(mode, n, f),
             "core_part_us": predict(fits[mode], f)}
            for (m, l, n, f, t) in pts if m == mode]

    rt = [p for p in pts if p[1].startswith("4 B op through the runtime")]
    if rt and overs:
        print("\n### The runtime's 4-byte op at the largest np: measured, and the model's two "
              "parts\n")
        print("| mode | np | ranks per core | measured | core part (a core per rank) | "
              "+ oversubscription | model |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for mode in overs:
            mine = [p for p in rt if p[0] == mode]
            if not mine:
                continue
            _, _, n, f, t = max(mine, key=lambda p: p[2])
            core = predict(fits[mode], f)
            full = model(mode, n, f)
            print("| %s | %d | %g | %s | %s | %s | %s |" % (mode, n, float(n) / c, us(t),
                                                          us(core), us(full - core), us(full)))
    return fits, overs


def prediction_rows(par, n, view, a):
    feats = [cached_round("old", n, view), cached_round("new", n, view)]
    feats += [full_round(d, n, view, a.request_bytes, a.response_bytes) for d in DESIGNS]
    feats += [small_op(d, n, view) for d in DESIGNS]
    return [predict(par, f) for f in feats]


COLS = ["cached_old", "cached_new", "full_old", "full_new", "full_main", "op_old", "op_new",
        "op_main"]


def report_prediction(a, pts, fits, modes, view, result):
    ranks = [int(x) for x in a.ranks.split(",") if x]
    base_mode = "netns" if "netns" in fits else modes[0]
    base = fits[base_mode]
    scenarios = [("fit %s" % m, fits[m]) for m in modes]
    scenarios.append(("network, %g us" % a.alpha_us,
                      dict(base, alpha_p2p_us=a.alpha_us, alpha_gloo_us=a.alpha_us)))
    print("\n## Prediction for a cluster with a core per rank (the core part): a cached round, a "
          "full (negotiating) round, and a cached 4-byte allreduce through the runtime\n")
    print("old = ring bit-vector allreduce, direct gather, chain broadcast; new = recursive "
          "doubling + binomial-tree broadcast (direct gather; the 4-byte data by Gloo's ring); "
          "main = new + binomial-tree gather, and a small cached allreduce riding in the round "
          "(core/piggyback; main's cached round is new's). \"network, %g us\": both alphas %g "
          "us, beta and gammas of the %s fit.\n" % (a.alpha_us, a.alpha_us, base_mode))
    print("| alphas from | ranks | cached round old | new | full round old | new | main "
          "| 4 B op old | new | main |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, par in scenarios:
        for n in ranks:
            vals = prediction_rows(par, n, view, a)
            print("| %s | %d | %s |" % (name, n, " | ".join(us(v) for v in vals)))
            result["predictions"].append({"alphas_from": name, "ranks": n,
                                          "values_us": dict(zip(COLS, vals))})
    print("\nkolo p2p steps at N: cached round old 2(N-1), new log2 N (+ gamma_coll); a full "
          "round adds the gather, 2(N-1) receives (old, new) or log2 N (main), and 2(N-1) (old) "
          "or 2 log2 N broadcast steps. The 4-byte op: gamma_rt + the cached round + 2(N-1) Gloo "
          "steps (old, new), or nothing more (main).")

    # sensitivity: how far a prediction moves when one series is left out of the core fit
    print("\n### Sensitivity: the fit rows' range when any one series is left out of the core "
          "fit\n")
    print("| fit | ranks | cached round old | new | full round old | new | main | 4 B op old "
          "| new | main |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for mode in modes:
        core = [p for p in pts if p[0] == mode and p[2] <= a.cores]
        labels = sorted(set(p[1] for p in core))
        refits = []
        for label in labels:
            rest = [p for p in core if p[1] != label]
            if rest and matrix_rank([[f.get(k, 0) / t for k, _ in PARAMS]
                                     for _, _, _, f, t in rest]) >= \
                    matrix_rank([[f.get(k, 0) / t for k, _ in PARAMS] for _, _, _, f, t in core]):
                refits.append(fit(rest))
        if not refits:
            print("| %s | - | too few series |" % mode)
            continue
        for n in ranks:
            allv = [prediction_rows(par, n, view, a) for par in refits]
            lo = [min(v[i] for v in allv) for i in range(len(COLS))]
            hi = [max(v[i] for v in allv) for i in range(len(COLS))]
            print("| %s | %d | %s |" % (mode, n, " | ".join(
                "%s..%s" % (us(l), us(h)) for l, h in zip(lo, hi))))
            result["sensitivity"].append({"fit": mode, "ranks": n, "refits": len(refits),
                                          "low_us": dict(zip(COLS, lo)),
                                          "high_us": dict(zip(COLS, hi))})


def recorded_cores(rows):
    """The measuring machine's cores, as scaling.py records them (0: not recorded, or rows from
    machines that differ: then --cores must say)."""
    seen = set(str(r.get("cores") or "").strip() for r in rows)
    if len(seen) != 1:
        return 0
    value = seen.pop()
    return int(value) if value.isdigit() else 0


def default_cores():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="scaling.csv written by bench/scaling.py")
    ap.add_argument("--cores", type=int, default=0,
                    help="cores of the machine that measured (default: the csv's cores column, "
                         "which scaling.py writes, else this machine's); runs "
                         "with np <= cores fit the core part, the others the oversubscription "
                         "part")
    ap.add_argument("--fit-max-np", type=int, default=0, help=argparse.SUPPRESS)  # old name
    ap.add_argument("--ranks", default="64,256,1024", help="rank counts to predict")
    ap.add_argument("--alpha-us", type=float, default=20.0,
                    help="the network scenario's alpha (us per message step)")
    ap.add_argument("--cache-capacity", type=int, default=1024,
                    help="KOLO_CACHE_CAPACITY: the bit vector is 2 + this many bytes")
    ap.add_argument("--request-bytes", type=int, default=96, help="one rank's request list")
    ap.add_argument("--response-bytes", type=int, default=96, help="the response list")
    ap.add_argument("--json", help="also write parameters, residuals and predictions here")
    a = ap.parse_args(sys.argv[1:] if argv is None else argv)
    view = 2 + a.cache_capacity
    with open(a.csv) as f:
        rows = list(csv.DictReader(f))
    a.cores = a.cores or a.fit_max_np or recorded_cores(rows) or default_cores()
    if a.cores < 1:
        ap.error("--cores needs 1 or more")
    pts = points(rows, view)
    modes = sorted(set(p[0] for p in pts))
    if not modes:
        print("cost_model.py: %s has no measured points" % a.csv, file=sys.stderr)
        return 1
    warnings = []
    for mode in modes:
        core = [p for p in pts if p[0] == mode and p[2] <= a.cores]
        if not core:
            print("cost_model.py: %s: no run with np <= %d (the cores) to fit the core part "
                  "(alpha, beta, gamma) on; the oversubscribed runs measure waiting for a core, "
                  "not the network. Pass --cores with the measuring machine's cores if it had "
                  "more." % (mode, a.cores), file=sys.stderr)
            return 1
        why = check_part("%s core part" % mode, core, [k for k, _ in PARAMS], warnings)
        if why:
            print("cost_model.py: %s: refusing to fit" % why, file=sys.stderr)
            return 1
    print("# %s: %d figures; modes %s; np %s; cores %d (np <= %d: core part, np > %d: "
          "oversubscription part)\n" % (a.csv, len(pts), ", ".join(modes),
                                        ",".join(map(str, sorted(set(p[2] for p in pts)))),
                                        a.cores, a.cores, a.cores))
    for w in warnings:
        print("**WARNING**: %s.\n" % w)
    result = {"cores": a.cores, "fits": {}, "oversubscription": {}, "series": [],
              "predictions": [], "sensitivity": [], "warnings": warnings}
    n_before = len(warnings)
    fits, _ = report_fit(a, pts, modes, result, warnings)
    for w in warnings[n_before:]:
        print("\n**WARNING**: %s." % w)
    report_prediction(a, pts, fits, modes, view, result)
    for w in warnings:
        print("cost_model.py: WARNING: %s" % w, file=sys.stderr)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

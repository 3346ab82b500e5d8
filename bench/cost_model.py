#!/usr/bin/env python3
"""Alpha-beta cost model of kolo's coordinator round and small-op latency, fitted to the
measurements of bench/scaling.py (its scaling.csv), and its prediction at large rank counts
for the old round (ring), the new one (recursive doubling + binomial tree) and main's (new +
tree gather + small allreduces carried in the round).

    /usr/bin/python3 bench/cost_model.py build/scaling/scaling.csv
    /usr/bin/python3 bench/cost_model.py RESULTS.csv --ranks 64,256,1024 --alpha-us 20

Model: t = gamma + alpha_p2p * S_p2p + alpha_gloo * S_gloo + beta * B. S_p2p are sequential
message steps of kolo's own algorithms (point-to-point through kolo's Transport, completed by
polling with backoff: transport/poll_support.h), S_gloo steps inside Gloo's own collectives
(blocking waits woken by Gloo's I/O thread); the two kinds of step cost differently, so each has
its alpha. B are the bytes the critical path sends (ring and halving-doubling reductions move
2(N-1)/N of the buffer, recursive doubling log2(N) times the buffer). gamma is a fixed software
cost per call: gamma_coll for a bare collective (kolo-bench rows, Gloo called directly),
gamma_rt for one op through the runtime (queue, coordinator wake-up, handle completion). All
five are fitted per mode (local / netns) by least squares on the relative error (every point
weighs alike whether it is 50 us or 50 ms), constrained to be >= 0.

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
import sys

KOLO_ALGORITHMS = ("ring", "recursive_doubling", "halving_doubling")  # kolo p2p
GLOO_ALGORITHMS = ("native", "gloo_ring", "gloo_hd")  # inside Gloo
# feature -> fitted parameter (us per unit of the feature)
PARAMS = [("p2p", "alpha_p2p_us"), ("gloo", "alpha_gloo_us"), ("bytes", "beta_us_per_byte"),
          ("coll", "gamma_coll_us"), ("rt", "gamma_rt_us")]


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


def collective(algo, n, size):
    """Features of one bare allreduce of `size` bytes with `algo`."""
    kind = "p2p" if algo in KOLO_ALGORITHMS else "gloo"
    b = rd_steps(n) * size if algo == "recursive_doubling" else 2.0 * (n - 1) / n * size
    return {kind: steps(algo, n), "bytes": b, "coll": 1}


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
        return {"p2p": 2 * (n - 1), "bytes": 2.0 * (n - 1) / n * view, "coll": 1}
    extra = 8 if design == "main" else 0
    return {"p2p": rd_steps(n), "bytes": rd_steps(n) * (view + extra), "coll": 1}


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


def predict(par, feats):
    return sum(par[name] * feats.get(key, 0) for key, name in PARAMS)


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


# ---- non-negative least squares on the relative error (5 unknowns: every subset, the best) ----
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


def fit(pts):
    """Minimizes sum(((model - t) / t)^2) with every parameter >= 0."""
    keys = [k for k, _ in PARAMS]
    rows = [[f.get(k, 0) / t for k in keys] for _, _, _, f, t in pts]
    scale = [max(abs(r[j]) for r in rows) for j in range(len(keys))]
    best = None
    for size in range(1, len(keys) + 1):
        for subset in itertools.combinations(range(len(keys)), size):
            if any(scale[j] == 0 for j in subset):
                continue  # no point measures this parameter
            x = solve([[r[j] / scale[j] for j in subset] for r in rows], [1.0] * len(rows))
            if x is None or min(x) < 0:
                continue
            full = [0.0] * len(keys)
            for j, xv in zip(subset, x):
                full[j] = xv / scale[j]
            err = sum((sum(f * p for f, p in zip(r, full)) - 1.0) ** 2 for r in rows)
            if best is None or err < best[0] - 1e-15:
                best = (err, full)
    return {name: v for (_, name), v in zip(PARAMS, best[1])}


# ---- report -----------------------------------------------------------------------------------
def us(v):
    if v >= 1e6:
        return "%.2f s" % (v / 1e6)
    if v >= 1e3:
        return "%.1f ms" % (v / 1e3)
    return "%.0f us" % v


def report_fit(a, pts, modes, result):
    print("## Fit: t = gamma + alpha_p2p * kolo steps + alpha_gloo * Gloo steps + beta * bytes "
          "(per mode; least squares on the relative error, parameters >= 0)\n")
    print("| mode | points | np | alpha_p2p (us/step) | alpha_gloo (us/step) | beta (ns/B) | "
          "gamma_coll (us) | gamma_rt (us) | rms rel. residual | worst |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    fits = {}
    for mode in modes:
        mp = [p for p in pts if p[0] == mode]
        used = [p for p in mp if not a.fit_max_np or p[2] <= a.fit_max_np]
        if not used:
            raise SystemExit("cost_model.py: no %s points with np <= %d" % (mode, a.fit_max_np))
        par = fit(used)
        fits[mode] = par
        res = [(predict(par, f) - t) / t for _, _, _, f, t in used]
        rms = math.sqrt(sum(r * r for r in res) / len(res))
        worst = max(range(len(res)), key=lambda i: abs(res[i]))
        print("| %s | %d | %s | %.1f | %.1f | %.3f | %.0f | %.0f | %.0f%% | %s, np %d: %+.0f%% |"
              % (mode, len(used), ",".join(map(str, sorted(set(p[2] for p in used)))),
                 par["alpha_p2p_us"], par["alpha_gloo_us"], par["beta_us_per_byte"] * 1e3,
                 par["gamma_coll_us"], par["gamma_rt_us"], 100 * rms, used[worst][1],
                 used[worst][2], 100 * res[worst]))
        result["fits"][mode] = dict(par, rms_relative_residual=rms, residuals=[
            {"label": l, "np": n, "measured_us": t, "model_us": predict(par, f)}
            for (_, l, n, f, t) in mp])

    all_np = sorted(set(p[2] for p in pts))
    print("\n### Residuals: measured / model (us)\n")
    print("| mode | figure | " + " | ".join("np %d" % n for n in all_np) + " |")
    print("| --- | --- |" + " ---: |" * len(all_np))
    for mode in modes:
        labels = []
        for p in pts:
            if p[0] == mode and p[1] not in labels:
                labels.append(p[1])
        for label in labels:
            cells = []
            for n in all_np:
                m = [p for p in pts if p[0] == mode and p[1] == label and p[2] == n]
                cells.append("-" if not m else "%.0f / %.0f" % (m[0][4],
                                                                 predict(fits[mode], m[0][3])))
            print("| %s | %s | %s |" % (mode, label, " | ".join(cells)))
    return fits


def report_prediction(a, fits, modes, view, result):
    ranks = [int(x) for x in a.ranks.split(",") if x]
    base = fits.get("netns") or fits[modes[0]]
    scenarios = [("fit %s" % m, fits[m]) for m in modes]
    scenarios.append(("network, %g us" % a.alpha_us,
                      dict(base, alpha_p2p_us=a.alpha_us, alpha_gloo_us=a.alpha_us)))
    print("\n## Prediction: a cached round, a full (negotiating) round, and a cached 4-byte "
          "allreduce through the runtime\n")
    print("old = ring bit-vector allreduce, direct gather, chain broadcast; new = recursive "
          "doubling + binomial-tree broadcast (direct gather; the 4-byte data by Gloo's ring); "
          "main = new + binomial-tree gather, and a small cached allreduce riding in the round "
          "(core/piggyback; main's cached round is new's). \"network, %g us\": both alphas %g "
          "us, beta and gammas of the %s fit.\n" % (a.alpha_us, a.alpha_us,
                                                  "netns" if "netns" in fits else modes[0]))
    print("| alphas from | ranks | cached round old | new | full round old | new | main "
          "| 4 B op old | new | main |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, par in scenarios:
        for n in ranks:
            feats = [cached_round("old", n, view), cached_round("new", n, view)]
            feats += [full_round(d, n, view, a.request_bytes, a.response_bytes) for d in DESIGNS]
            feats += [small_op(d, n, view) for d in DESIGNS]
            vals = [predict(par, f) for f in feats]
            print("| %s | %d | %s |" % (name, n, " | ".join(us(v) for v in vals)))
            result["predictions"].append({"alphas_from": name, "ranks": n, "values_us": dict(zip(
                ["cached_old", "cached_new", "full_old", "full_new", "full_main", "op_old",
                 "op_new", "op_main"], vals))})
    print("\nkolo p2p steps at N: cached round old 2(N-1), new log2 N (+ gamma_coll); a full "
          "round adds the gather, 2(N-1) receives (old, new) or log2 N (main), and 2(N-1) (old) "
          "or 2 log2 N broadcast steps. The 4-byte op: gamma_rt + the cached round + 2(N-1) Gloo "
          "steps (old, new), or nothing more (main).")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="scaling.csv written by bench/scaling.py")
    ap.add_argument("--ranks", default="64,256,1024", help="rank counts to predict")
    ap.add_argument("--alpha-us", type=float, default=20.0,
                    help="the network scenario's alpha (us per message step)")
    ap.add_argument("--cache-capacity", type=int, default=1024,
                    help="KOLO_CACHE_CAPACITY: the bit vector is 2 + this many bytes")
    ap.add_argument("--request-bytes", type=int, default=96, help="one rank's request list")
    ap.add_argument("--response-bytes", type=int, default=96, help="the response list")
    ap.add_argument("--fit-max-np", type=int, default=0,
                    help="fit only points with np <= this (0: all); residuals still list all")
    ap.add_argument("--json", help="also write parameters, residuals and predictions here")
    a = ap.parse_args(sys.argv[1:] if argv is None else argv)
    view = 2 + a.cache_capacity
    with open(a.csv) as f:
        rows = list(csv.DictReader(f))
    pts = points(rows, view)
    modes = sorted(set(p[0] for p in pts))
    if not modes:
        print("cost_model.py: %s has no measured points" % a.csv, file=sys.stderr)
        return 1
    result = {"fits": {}, "predictions": []}
    fits = report_fit(a, pts, modes, result)
    report_prediction(a, fits, modes, view, result)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

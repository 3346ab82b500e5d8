"""bench/scaling.py and bench/cost_model.py: a CI-size sweep at np 2 and the model fit on it
(fails when either script breaks, or when the benchmarks stop printing the Gloo baselines the
sweep reads), and the fit against synthetic points with known parameters (fails when the
model's least squares or its step counts go wrong)."""

import csv
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.realpath(__file__))
BENCH = os.path.join(os.path.dirname(os.path.dirname(HERE)), "bench")
BUILD = os.environ.get("KOLO_BENCH_BUILD_DIR", os.path.join(os.path.dirname(BENCH), "build"))
sys.path.insert(0, BENCH)

import cost_model  # noqa: E402
import scaling  # noqa: E402


def run(argv, timeout):
    return subprocess.run([sys.executable] + argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=timeout)


def test_quick_sweep_and_fit(tmp_path):
    out = str(tmp_path / "res")
    r = run([os.path.join(BENCH, "scaling.py"), "--quick", "--np", "2", "--mode", "local,netns",
             "--build", BUILD, "--out", out, "--timeout", "60"], timeout=150)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "| 2 | local |" in r.stdout
    with open(os.path.join(out, "scaling.csv")) as f:
        rows = list(csv.DictReader(f))
    local = [x for x in rows if x["mode"] == "local"]
    assert len(local) == 1 and local[0]["np"] == "2"
    for col in ("runtime_us", "gloo_ring_us", "gloo_hd_us", "kolo_ring_us", "kb_small_ring_us",
                "kb_small_gloo_ring_us", "kb_small_gloo_hd_us", "kb_large_recursive_doubling_us"):
        assert float(local[0][col]) > 0, col
    if "netns: skipped" not in r.stdout:  # root and ip: the two-host run must have worked too
        assert [x["np"] for x in rows if x["mode"] == "netns"] == ["2"]
    with open(os.path.join(out, "scaling.json")) as f:
        assert json.load(f)["failures"] == []

    m = run([os.path.join(BENCH, "cost_model.py"), os.path.join(out, "scaling.csv"),
             "--json", os.path.join(out, "model.json")], timeout=60)
    assert m.returncode == 0, m.stdout + m.stderr
    assert "| network, 20 us | 1024 |" in m.stdout
    with open(os.path.join(out, "model.json")) as f:
        model = json.load(f)
    assert len(model["predictions"]) == 3 * (len(model["fits"]) + 1)


def synthetic_rows(par, large):
    rows = []
    for n in (2, 4, 8, 16):
        r = {c: "" for c in scaling.COLUMNS}
        r.update({"mode": "local", "np": n, "hosts": "x", "large_bytes": large})

        def coll(algo, size):
            return cost_model.predict(par, cost_model.collective(algo, n, size))
        r["gloo_ring_us"], r["gloo_hd_us"] = coll("gloo_ring", 4), coll("gloo_hd", 4)
        r["kolo_ring_us"], r["gloo_native_us"] = coll("ring", 4), coll("native", 4)
        for algo in cost_model.KOLO_ALGORITHMS + cost_model.GLOO_ALGORITHMS:
            r["kb_small_%s_us" % algo] = coll(algo, 4)
            r["kb_large_%s_us" % algo] = coll(algo, large)
        r["runtime_us"] = cost_model.predict(par, cost_model.small_op("new", n, 1026))
        rows.append(r)
    return rows


def test_fit_recovers_known_parameters(tmp_path):
    par = {"alpha_p2p_us": 90.0, "alpha_gloo_us": 40.0, "beta_us_per_byte": 0.002,
           "gamma_coll_us": 15.0, "gamma_rt_us": 250.0}
    path = str(tmp_path / "synthetic.csv")
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=scaling.COLUMNS)
        w.writeheader()
        for r in synthetic_rows(par, 4 << 20):
            w.writerow(r)
    m = run([os.path.join(BENCH, "cost_model.py"), path, "--json", str(tmp_path / "m.json")],
            timeout=60)
    assert m.returncode == 0, m.stdout + m.stderr
    with open(str(tmp_path / "m.json")) as f:
        fit = json.load(f)["fits"]["local"]
    for k, v in par.items():
        assert fit[k] == pytest.approx(v, rel=1e-3), k
    assert fit["rms_relative_residual"] < 1e-6
    # the new round is log2 N kolo steps, the old one 2 (N - 1): at 1024 ranks 10 against 2046
    assert cost_model.cached_round("new", 1024, 1026)["p2p"] == 10
    assert cost_model.cached_round("old", 1024, 1026)["p2p"] == 2046
    # a full round at 1024: + 2 x 1023 gather receives + 2 broadcasts (2 x 10 tree, 2 x 1023 chain)
    assert cost_model.full_round("new", 1024, 1026, 96, 96)["p2p"] == 10 + 2046 + 20
    assert cost_model.full_round("old", 1024, 1026, 96, 96)["p2p"] == 2046 * 3
    # main: tree gather (10 steps); the 4-byte op rides in the round (no Gloo steps)
    assert cost_model.full_round("main", 1024, 1026, 96, 96)["p2p"] == 10 + 10 + 20
    assert cost_model.small_op("main", 1024, 1026).get("gloo", 0) == 0
    assert cost_model.small_op("new", 1024, 1026)["gloo"] == 2046


def test_bad_arguments_are_refused(tmp_path):
    r = run([os.path.join(BENCH, "scaling.py"), "--mode", "cluster", "--out", str(tmp_path)],
            timeout=30)
    assert r.returncode == 2 and "unknown mode" in r.stderr
    empty = tmp_path / "empty.csv"
    empty.write_text(",".join(scaling.COLUMNS) + "\n")
    r = run([os.path.join(BENCH, "cost_model.py"), str(empty)], timeout=30)
    assert r.returncode == 1 and "no measured points" in r.stderr

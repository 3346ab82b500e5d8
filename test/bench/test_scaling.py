# SPDX-License-Identifier: Apache-2.0
"""bench/scaling.py and bench/cost_model.py: a CI-size sweep at np 2 and the model fit on it
(fails when either script breaks, or when the benchmarks stop printing the Gloo baselines the
sweep reads), and the fit against synthetic points with known parameters (fails when the
model's least squares, its split into a core part (np <= cores) and an oversubscription part
(np > cores), its step counts, or its warning on too few rank counts go wrong)."""

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
    # --quick's large size is 4 KiB: tens of us, printed in us (it once printed "0.0 (auto)" ms)
    assert "kolo-bench 4 KiB: best kolo / Gloo ring / Gloo HD (us) |" in r.stdout
    with open(os.path.join(out, "scaling.csv")) as f:
        rows = list(csv.DictReader(f))
    local = [x for x in rows if x["mode"] == "local"]
    assert len(local) == 1 and local[0]["np"] == "2"
    assert local[0]["cores"] == str(scaling.machine_cores())  # cost_model.py's default --cores
    for col in ("runtime_us", "gloo_ring_us", "gloo_hd_us", "kolo_ring_us", "kb_small_ring_us",
                "kb_small_gloo_ring_us", "kb_small_gloo_hd_us", "kb_large_recursive_doubling_us"):
        assert float(local[0][col]) > 0, col
    if "netns: skipped" not in r.stdout:  # root and ip: the two-host run must have worked too
        assert [x["np"] for x in rows if x["mode"] == "netns"] == ["2"]
    with open(os.path.join(out, "scaling.json")) as f:
        assert json.load(f)["failures"] == []

    m = run([os.path.join(BENCH, "cost_model.py"), os.path.join(out, "scaling.csv"),
             "--cores", "2", "--json", os.path.join(out, "model.json")], timeout=60)
    assert m.returncode == 0, m.stdout + m.stderr
    assert "| network, 20 us | 1024 |" in m.stdout
    # one rank count: the fit says loudly that its growth with N is assumed, not measured
    assert "WARNING: local core part: 1 distinct rank count (np 2)" in m.stderr
    with open(os.path.join(out, "model.json")) as f:
        model = json.load(f)
    assert len(model["predictions"]) == 3 * (len(model["fits"]) + 1)
    assert model["warnings"]


PAR = {"alpha_p2p_us": 90.0, "alpha_gloo_us": 40.0, "beta_us_per_byte": 0.002,
       "gamma_coll_us": 15.0, "gamma_rt_us": 250.0}
OVER = {"omega_sync_us": 30.0, "omega_call_us": 50.0, "omega_bytes_us_per_byte": 0.001}


def synthetic_rows(par, large, nps=(2, 4, 8, 16), over=None, cores=1 << 20):
    """Figures the model gives exactly: the core part, plus the oversubscription term `over`
    for np > cores."""
    rows = []
    for n in nps:
        r = {c: "" for c in scaling.COLUMNS}
        r.update({"mode": "local", "np": n, "hosts": "x", "large_bytes": large})

        def t(feats):
            return cost_model.predict_machine(par, over, feats, n, cores)

        def coll(algo, size):
            return t(cost_model.collective(algo, n, size))
        r["gloo_ring_us"], r["gloo_hd_us"] = coll("gloo_ring", 4), coll("gloo_hd", 4)
        r["kolo_ring_us"], r["gloo_native_us"] = coll("ring", 4), coll("native", 4)
        for algo in cost_model.KOLO_ALGORITHMS + cost_model.GLOO_ALGORITHMS:
            r["kb_small_%s_us" % algo] = coll(algo, 4)
            r["kb_large_%s_us" % algo] = coll(algo, large)
        r["runtime_us"] = t(cost_model.small_op("new", n, 1026))
        rows.append(r)
    return rows


def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=scaling.COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow(r)


def fit_csv(tmp_path, rows, *flags):
    path = str(tmp_path / "synthetic.csv")
    write_csv(path, rows)
    m = run([os.path.join(BENCH, "cost_model.py"), path, "--json", str(tmp_path / "m.json")] +
            list(flags), timeout=60)
    assert m.returncode == 0, m.stdout + m.stderr
    with open(str(tmp_path / "m.json")) as f:
        return m, json.load(f)


def test_fit_recovers_known_parameters(tmp_path):
    # five rank counts, all with a core each: the core part alone, no warning
    m, model = fit_csv(tmp_path, synthetic_rows(PAR, 4 << 20, nps=(2, 4, 8, 16, 32)),
                       "--cores", "32")
    fit = model["fits"]["local"]
    for k, v in PAR.items():
        assert fit[k] == pytest.approx(v, rel=1e-3), k
    assert fit["rms_relative_residual"] < 1e-6
    assert model["warnings"] == [] and "WARNING" not in m.stderr + m.stdout
    assert model["oversubscription"] == {}
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


def test_fit_takes_the_cores_the_csv_recorded(tmp_path):
    # scaling.py writes the measuring machine's cores; without --cores the fit splits there,
    # whatever this machine has
    rows = synthetic_rows(PAR, 4 << 20, over=OVER, cores=2)
    for r in rows:
        r["cores"] = 2
    _, model = fit_csv(tmp_path, rows)
    assert model["fits"]["local"]["points"] == 17
    assert model["oversubscription"]["local"]["points"] == 51
    assert cost_model.recorded_cores(rows) == 2
    assert cost_model.recorded_cores([{"cores": "2"}, {"cores": "4"}]) == 0  # two machines
    assert cost_model.recorded_cores([{"cores": ""}]) == 0  # an older csv


def test_fit_separates_oversubscription(tmp_path):
    # 2 cores: np 2 fits alpha, beta, gamma; np 4, 8, 16 the (np / cores - 1) term on top
    m, model = fit_csv(tmp_path, synthetic_rows(PAR, 4 << 20, over=OVER, cores=2), "--cores", "2")
    fit, over = model["fits"]["local"], model["oversubscription"]["local"]
    assert fit["points"] == 17 and over["points"] == 51
    for k, v in PAR.items():
        assert fit[k] == pytest.approx(v, rel=1e-3), k
    for k, v in OVER.items():
        assert over[k] == pytest.approx(v, rel=1e-3), k
    assert fit["rms_relative_residual"] < 1e-6 and over["rms_relative_residual"] < 1e-6
    assert over["core_alone_rms_relative_residual"] > 0.1  # the term is needed
    # the predictions use the core part only: one core per rank, whatever this machine had
    p = [x for x in model["predictions"] if x["alphas_from"] == "fit local" and
         x["ranks"] == 1024][0]["values_us"]
    view = 1026
    assert p["op_main"] == pytest.approx(
        cost_model.predict(PAR, cost_model.small_op("main", 1024, view)), rel=1e-3)
    assert p["cached_new"] == pytest.approx(
        cost_model.predict(PAR, cost_model.cached_round("new", 1024, view)), rel=1e-3)
    # the core part saw one rank count (np 2): said loudly, on stdout and stderr
    assert "WARNING: local core part: 1 distinct rank count (np 2) for 5 parameters" in m.stderr
    assert "**WARNING**: local core part: 1 distinct rank count" in m.stdout
    # butterfly steps: recursive doubling always; kolo's halving-doubling only with >= N
    # elements (it skips empty chunks); rings never
    assert cost_model.collective("recursive_doubling", 16, 4)["sync"] == 4
    assert cost_model.collective("halving_doubling", 16, 4)["sync"] == 0
    assert cost_model.collective("halving_doubling", 16, 4 << 20)["sync"] == 8
    assert cost_model.collective("gloo_hd", 16, 4)["sync"] == 8
    assert cost_model.collective("ring", 16, 4 << 20)["sync"] == 0


def test_single_rank_count_warns(tmp_path):
    m, model = fit_csv(tmp_path, synthetic_rows(PAR, 4096, nps=(2,)), "--cores", "2")
    assert any("1 distinct rank count (np 2)" in w for w in model["warnings"])
    assert "cost_model.py: WARNING: local core part: 1 distinct rank count" in m.stderr
    assert "No run has more ranks than cores" in m.stdout
    # every run oversubscribed: no core part to fit alpha and beta on -- refused
    path = str(tmp_path / "synthetic.csv")
    r = run([os.path.join(BENCH, "cost_model.py"), path, "--cores", "1"], timeout=30)
    assert r.returncode == 1 and "no run with np <= 1" in r.stderr


def test_markdown_units():
    row = {c: "" for c in scaling.COLUMNS}
    row.update({"mode": "local", "np": "2", "runtime_us": "68", "gloo_ring_us": "99",
                "gloo_hd_us": "104", "kb_small_ring_us": "50", "kb_large_auto_us": "23.5",
                "kb_large_gloo_ring_us": "31", "kb_large_gloo_hd_us": "40"})
    quick = scaling.markdown([row], 4096)
    assert "4 KiB: best kolo / Gloo ring / Gloo HD (us) |" in quick
    assert "| 24 (auto) / 31 / 40 |" in quick and "0.0" not in quick
    row.update({"kb_large_auto_us": "2285.6", "kb_large_gloo_ring_us": "4204.9",
                "kb_large_gloo_hd_us": "3051.4"})
    full = scaling.markdown([row], 4 << 20)
    assert "4 MiB: best kolo / Gloo ring / Gloo HD (ms) |" in full
    assert "| 2.3 (auto) / 4.2 / 3.1 |" in full


def test_bad_arguments_are_refused(tmp_path):
    r = run([os.path.join(BENCH, "scaling.py"), "--mode", "cluster", "--out", str(tmp_path)],
            timeout=30)
    assert r.returncode == 2 and "unknown mode" in r.stderr
    empty = tmp_path / "empty.csv"
    empty.write_text(",".join(scaling.COLUMNS) + "\n")
    r = run([os.path.join(BENCH, "cost_model.py"), str(empty)], timeout=30)
    assert r.returncode == 1 and "no measured points" in r.stderr

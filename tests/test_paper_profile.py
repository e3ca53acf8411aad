"""``benchmarks/paper_profile.py``: its jobs are Snakemake's, every one gets a projection, the
schedule on 2 cores respects its bounds, and a projection joins a run's benchmark files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # the benchmarks package sits beside src/

from benchmarks import paper_profile  # noqa: E402
from benchmarks.paper_jobs import (  # noqa: E402
    PAPER_TARGETS,
    Job,
    compare,
    job_output,
    longest_chain_hours,
    measured_hours,
    paper_jobs,
    schedule_hours,
    totals,
)


@pytest.fixture(scope="module")
def paper_cfg():
    return paper_profile._paper_config()


def _tsv(path, seconds, cpu=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    if cpu is None:
        path.write_text(f"s\th:m:s\tmax_rss\n{seconds}\t0:00:00\t100\n")
    else:
        path.write_text(f"s\th:m:s\tmax_rss\tcpu_time\n{seconds}\t0:00:00\t100\t{cpu}\n")


def test_compare_joins_projection_with_benchmark_files(tmp_path):
    """Measured hours are CPU hours where the benchmark recorded them (what the projection
    prices), else wall hours; ``clock="wall"`` compares wall hours."""
    _tsv(tmp_path / "train" / "bmnist_h25.tsv", 7200.0, cpu=3600.0)
    _tsv(tmp_path / "harvest" / "bmnist_h100" / "epoch_1.tsv", 900.0)
    _tsv(tmp_path / "figures" / "fig3.tsv", 36.0)
    profile = {"jobs_hours": {"train/bmnist_h25": 1.6, "harvest/bmnist_h100/epoch_1": 0.5,
                              "deep/timing": 0.1}}  # fmt: skip
    assert measured_hours(tmp_path) == pytest.approx(
        {"train/bmnist_h25": 1.0, "harvest/bmnist_h100/epoch_1": 0.25, "figures/fig3": 0.01}
    )
    assert measured_hours(tmp_path, clock="wall")["train/bmnist_h25"] == pytest.approx(2.0)
    rows = {r["job"]: r for r in compare(profile, tmp_path)}
    assert rows["train/bmnist_h25"]["ratio"] == pytest.approx(1.0 / 1.6)
    assert rows["harvest/bmnist_h100/epoch_1"]["ratio"] == pytest.approx(0.5)
    assert rows["deep/timing"]["measured_hours"] is None and rows["deep/timing"]["ratio"] is None
    assert rows["figures/fig3"]["projected_hours"] is None
    assert [r["job"] for r in compare(profile, tmp_path)][0] == "train/bmnist_h25"
    with pytest.raises(ValueError, match="clock"):
        measured_hours(tmp_path, clock="cpu_time")


def test_a_training_resumed_over_several_starts_counts_every_start(tmp_path, capsys):
    """A training job's benchmark times its last start only; with the run's models and logs
    folders the epochs before that start and the part of the next one trained before it count
    too, and the command finds those folders beside the benchmark folder by itself."""
    import json

    import pandas as pd

    from benchmarks.paper_jobs import main
    from tapmachine.io.runlog import resume_message, resume_within_message

    bench = tmp_path / "benchmarks" / "paper"
    _tsv(bench / "train" / "bmnist_h25.tsv", 500.0, cpu=400.0)
    models, logs = tmp_path / "results" / "paper" / "models", tmp_path / "logs" / "paper"
    (models / "bmnist_h25").mkdir(parents=True)
    pd.DataFrame(
        {"epoch": [1, 2, 3], "epoch_seconds": [1000.0, 1100.0, 300.0],
         "epoch_cpu_seconds": [900.0, 1000.0, 290.0]}
    ).to_csv(models / "bmnist_h25" / "metrics.csv", index=False)  # fmt: skip
    (logs / "train").mkdir(parents=True)
    (logs / "train" / "bmnist_h25.log").write_text(
        resume_message("ckpt/epoch_2.pt", 2) + "\n" + resume_within_message(3, 40, 200.0, 180.0)
    )
    assert measured_hours(bench)["train/bmnist_h25"] == pytest.approx(400.0 / 3600)
    cpu = (900.0 + 1000.0 + 180.0 + 400.0) / 3600
    assert measured_hours(bench, models, logs)["train/bmnist_h25"] == pytest.approx(cpu)
    wall = (1000.0 + 1100.0 + 200.0 + 500.0) / 3600
    assert measured_hours(bench, models, logs, clock="wall")["train/bmnist_h25"] == pytest.approx(
        wall
    )
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps({"jobs_hours": {"train/bmnist_h25": cpu / 2}}) + "\n")
    assert main([str(profile), str(bench)]) == 0  # no model.pt: not finished, not measured
    out = capsys.readouterr().out
    assert f"| train/bmnist_h25 | {cpu / 2:.2f} |  |  | not finished |" in out
    assert "| summed over the 0 jobs measured | 0.00 | 0.00 |  | |" in out
    (models / "bmnist_h25" / "model.pt").write_bytes(b"")
    assert main([str(profile), str(bench)]) == 0
    out = capsys.readouterr().out
    assert f"| train/bmnist_h25 | {cpu / 2:.2f} | {cpu:.2f} | 2.00 | finished |" in out
    assert f"| summed over the 1 jobs measured | {cpu / 2:.2f} | {cpu:.2f} | 2.00 | |" in out


def test_a_job_counts_as_measured_only_once_its_output_is_there(tmp_path):
    """Snakemake writes a benchmark file for a job it stops too: with the run's results folder,
    a job whose output is missing is not measured; every paper job has an output to look for,
    at the path its rule writes."""
    bench, results = tmp_path / "benchmarks" / "paper", tmp_path / "results" / "paper"
    names = ["harvest/bmnist_h100/epoch_1", "likelihood/score_final_m", "deep/timing"]
    for name in names:
        _tsv(bench / f"{name}.tsv", 360.0)
    profile = {"jobs_hours": dict.fromkeys(names, 0.1)}
    done = results / "solutions" / "bmnist_h100" / "epoch_1.npz"
    done.parent.mkdir(parents=True)
    done.write_bytes(b"")
    rows = {r["job"]: r["measured_hours"] for r in compare(profile, bench, results=results)}
    assert rows == {names[0]: pytest.approx(0.1), names[1]: None, names[2]: None}
    assert {r["job"]: r["measured_hours"] for r in compare(profile, bench)}[names[1]] == 0.1
    assert job_output("likelihood/score_epochs_bmnist_h500") == "likelihood/bmnist_h500/scores.csv"
    assert job_output("denoise/baselines") == "denoise/baselines/bsc.csv"
    assert job_output("figures/fig3") is None


def test_a_job_whose_output_was_brought_in_is_not_measured(tmp_path):
    """A model copied into the run (Fig. 10's adaTAP models from a GPU) has its output but no
    benchmark file: it is ``brought in``, not measured, and left out of the sums, while the
    jobs this run finished are summed against their projections."""
    bench, results = tmp_path / "benchmarks" / "paper", tmp_path / "results" / "paper"
    _tsv(bench / "train" / "bmnist_h25.tsv", 7200.0, cpu=3600.0)
    _tsv(bench / "train" / "bmnist_h50.tsv", 600.0, cpu=500.0)  # stopped: no model.pt
    for model in ("bmnist_h25", "bmnist_fig10_adatap10"):
        (results / "models" / model).mkdir(parents=True)
        (results / "models" / model / "model.pt").write_bytes(b"")
    profile = {"jobs_hours": {"train/bmnist_h25": 0.8, "train/bmnist_h50": 0.5,
                              "train/bmnist_fig10_adatap10": 24.0, "deep/timing": 0.1}}  # fmt: skip
    rows = {r["job"]: r for r in compare(profile, bench, results=results)}
    assert {job: r["state"] for job, r in rows.items()} == {
        "train/bmnist_h25": "finished",
        "train/bmnist_h50": "not finished",
        "train/bmnist_fig10_adatap10": "brought in",
        "deep/timing": "not finished",
    }
    assert rows["train/bmnist_fig10_adatap10"]["measured_hours"] is None
    total = totals(list(rows.values()))
    assert total["jobs"] == 1 and total["projected_hours"] == pytest.approx(0.8)
    assert total["ratio"] == pytest.approx(1.0 / 0.8)
    assert {r["state"] for r in compare(profile, bench)} == {None}


def test_the_comparison_keeps_the_jobs_the_runs_config_plans(tmp_path, capsys, monkeypatch):
    """With the run's config files, a job its overlays leave out (paper_cpu.yaml leaves out
    sbmnist_h500) is not compared, though a model file of it lies in the run."""
    import json

    from benchmarks.paper_jobs import main

    bench, results = tmp_path / "benchmarks" / "paper", tmp_path / "results" / "paper"
    names = ["train/sbmnist_h500", "train/bmnist_h25"]
    for name in names:
        _tsv(bench / f"{name}.tsv", 360.0)
        model = results / "models" / name.removeprefix("train/") / "model.pt"
        model.parent.mkdir(parents=True)
        model.write_bytes(b"")
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps({"jobs_hours": dict.fromkeys(names, 0.2)}) + "\n")
    monkeypatch.chdir(ROOT)
    assert main([str(profile), str(bench)]) == 0
    assert "sbmnist_h500 | 0.20 | 0.10" in capsys.readouterr().out
    configs = [f"workflow/config/{f}.yaml" for f in ("paper", "sm_cd25_anchor", "paper_cpu")]
    assert main([str(profile), str(bench), "--configfile", *configs]) == 0
    out = capsys.readouterr().out
    assert "sbmnist_h500" not in out and "| train/bmnist_h25 | 0.20 | 0.10 |" in out


def test_schedule_on_two_cores_respects_its_bounds():
    jobs = [Job("train/a", "train", "a"), Job("score/a", "score_final", "a")]
    jobs += [Job("train/b", "train", "b"), Job("train/c", "train", "c")]
    hours = {"train/a": 10.0, "score/a": 1.0, "train/b": 3.0, "train/c": 3.0}
    assert longest_chain_hours(jobs, hours) == 11.0
    assert schedule_hours(jobs, hours, 2) == 11.0  # b and c beside a's chain
    hours["train/b"] = hours["train/c"] = 9.0
    wall = schedule_hours(jobs, hours, 2)
    assert wall >= max(sum(hours.values()) / 2, 11.0)
    assert wall == 18.0  # a then its score on one core, b then c on the other
    assert schedule_hours(jobs, hours, 1) == sum(hours.values())


def _job_name(output: str) -> str | None:
    """The benchmark name of the job that writes ``output`` (workflow/rules/*.smk)."""
    if not output.startswith("results/paper/"):
        return None
    parts = output.split("/")[2:]
    if parts[0] == "models" and parts[-1] == "model.pt":
        return f"train/{parts[1]}"
    if parts[0] == "solutions" and parts[-1].endswith(".npz"):
        return f"harvest/{parts[1]}/{parts[2].removesuffix('.npz')}"
    if parts[0] == "likelihood":
        kind = {
            "scores.csv": "score_epochs",
            "final.csv": "score_final",
            "exact.csv": "exact_curve",
        }
        return f"likelihood/{kind[parts[2]]}_{parts[1]}"
    if parts[0] == "denoise" and parts[-1] == "bsc.csv":
        return "denoise/baselines"
    if parts[0] == "denoise" and parts[-1] == "denoise_bsc.csv":
        return f"denoise/bsc_{parts[1]}"
    if parts[0] == "deep":
        return "deep/timing" if parts[1] == "fig10_timing.csv" else f"deep/curve_{parts[1]}"
    return None


@pytest.mark.slow
def test_profile_jobs_are_the_paper_dag(paper_cfg):
    """Every job Snakemake plans for the paper targets (and the ``harvest`` target) but data
    and drawing is one of ``paper_jobs``, under the name of its benchmark file, and no more."""
    out = subprocess.run(
        [sys.executable, "-m", "snakemake", *PAPER_TARGETS, "harvest", "-n", "--summary",
         "--configfile", str(ROOT / "workflow" / "config" / "paper.yaml")],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    planned = {_job_name(line.split("\t")[0]) for line in out.splitlines()} - {None}
    assert "train/rmnist_h500" in planned and "deep/curve_bmnist_dbm3" in planned
    assert {j.name for j in paper_jobs(paper_cfg)} == planned
    outputs = {line.split("\t")[0] for line in out.splitlines()}
    for name in planned:  # the output each job is known to have finished by
        assert f"results/paper/{job_output(name)}" in outputs, name


class _Stub:
    """Measurements with every unit cost ``unit`` seconds and every count 10 (for ``project``)."""

    def __init__(self, cfg, unit=1.0):
        flat = {"one": unit, "per_iter": unit, "fixed": 0.0}
        self.counts = {m: {"train": 10.0, "eval": 10.0, "curve": 10.0, "source": m}
                       for m in cfg["models"]}  # fmt: skip
        self.harvest = {m: {"iterations": 10.0, "source": m, "inits": 10, "rows": 10,
                            "seconds_per_init": unit} for m in cfg["harvest"]}  # fmt: skip
        self.denoise = {m: {"seconds": unit} for m in cfg["models"]}
        self.exact_epoch = self.baselines = self.timing = unit
        self.start = 0.0
        self._flat = flat

    def training(self, spec, name=None):
        pretrain = [dict(self._flat)] * len(spec["hidden"]) if spec.get("pretrain") else []
        return {"n_rows": 1000, "step": dict(self._flat), "eval": dict(self._flat),
                "eval_rows": 10, "data": "stub", "pretrain": pretrain}  # fmt: skip

    def curve_solve(self, spec):
        return dict(self._flat)

    def ais(self, ais, nh):
        return 100 * self._flat["one"]

    def score(self, part, nh):
        return {"ais": self._flat["one"], "pl": self._flat["one"]}

    def pl_image(self, nh, sites, n_images):
        return self._flat["one"]


def test_every_paper_job_gets_a_projection(paper_cfg):
    result = paper_profile.project(_Stub(paper_cfg), paper_cfg)
    names = {j.name for j in paper_jobs(paper_cfg)}
    assert set(result["jobs_hours"]) == names
    assert all(h > 0 for h in result["jobs_hours"].values())
    trained = {n.removeprefix("train/") for n in names if n.startswith("train/")}
    for target in ("rmnist_h500", "faces_h256", "sbmnist_h500_cd25", "bmnist_dbm3"):
        assert target in trained
    left_out = paper_profile.LEFT_OUT
    without = result["without_adatap100"]
    dropped = sum(h for n, h in result["jobs_hours"].items() if left_out in n)
    assert without["serial_hours"] == pytest.approx(result["serial_hours"] - dropped)
    assert without["wall_hours_2_cores"] <= result["wall_hours_2_cores"]


def test_choices_fit_the_budget_and_shrink_with_it(paper_cfg, monkeypatch):
    stub = _Stub(paper_cfg, unit=1e-3)  # Fig. 11 then fits below its largest size
    fig10 = paper_profile.choose_fig10_epochs(stub, paper_cfg)
    low, high = paper_profile.FIG10_EPOCHS
    assert low <= fig10["epochs"] <= high
    assert fig10["fig10_hours"] <= fig10["share_hours"]
    cfg = paper_profile._with_fig10_epochs(paper_cfg, fig10["epochs"])
    fig11 = paper_profile.choose_fig11_size(stub, cfg)
    units, joint, pre = fig11["size"]
    assert pre == paper_profile.FIG11_PRETRAIN
    wall = paper_profile._wall(stub, paper_profile._with_fig11_size(cfg, (units, joint, pre)))
    assert wall == pytest.approx(fig11["wall_hours_2_cores"])
    assert wall <= paper_profile.BUDGET_HOURS
    if joint < paper_profile.FIG11_JOINT[1]:  # one more joint epoch would not fit
        more = paper_profile._with_fig11_size(cfg, (units, joint + 1, paper_profile.FIG11_PRETRAIN))
        assert paper_profile._wall(stub, more) > paper_profile.BUDGET_HOURS
    assert all(
        t["wall_hours_at_20_epochs"] > paper_profile.BUDGET_HOURS for t in fig11["tried"][:-1]
    )
    assert fig10["fits"] and fig11["fits"]
    monkeypatch.setattr(paper_profile, "BUDGET_HOURS", wall / 2)
    smaller = paper_profile.choose_fig11_size(stub, cfg)
    assert smaller["size"] < fig11["size"]
    monkeypatch.setattr(paper_profile, "BUDGET_HOURS", 0.01)  # nothing fits: the smallest
    assert paper_profile.choose_fig11_size(stub, cfg)["size"] == list(paper_profile.FIG11_SMALLEST)
    none = paper_profile.choose_fig10_epochs(stub, paper_cfg)
    assert none["epochs"] == paper_profile.FIG10_EPOCHS[0] and not none["fits"]


def test_the_exact_curve_pays_for_ais_at_its_epochs_where_asked(paper_cfg):
    import copy

    cfg = copy.deepcopy(paper_cfg)
    exact = cfg["figures"]["fig3"]["exact"]
    exact.pop("ais", None)
    name = f"likelihood/exact_curve_{exact['models'][0]}"
    without = paper_profile.project(_Stub(cfg), cfg)["jobs_hours"][name]
    exact["ais"] = {"n_runs": 100, "schedule": "salakhutdinov", "n_betas": None}
    with_ais = paper_profile.project(_Stub(cfg), cfg)["jobs_hours"][name]
    assert with_ais == pytest.approx(without + len(exact["epochs"]) * 100 / 3600)


def test_a_runs_own_checkpoints_count_its_models(tmp_path):
    from benchmarks.paper_counts import count_source, run_checkpoint_sets

    models = tmp_path / "models"
    for epoch in (1, 2, 10, 3, 30):  # numeric order, not the names' order
        path = models / "bmnist_h25" / "checkpoints" / f"epoch_{epoch}.pt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    (models / "bmnist_h50" / "checkpoints").mkdir(parents=True)  # started, nothing written
    one = models / "rmnist_h100" / "checkpoints" / "epoch_1.pt"
    one.parent.mkdir(parents=True)
    one.write_bytes(b"")
    sets = run_checkpoint_sets(models, ["bmnist_h25", "bmnist_h50", "rmnist_h100", "faces_h256"])
    assert {n: [p.stem for p in ps] for n, ps in sets.items()} == {
        "bmnist_h25": ["epoch_1", "epoch_2", "epoch_3", "epoch_10", "epoch_30"],  # numeric order
        "rmnist_h100": ["epoch_1"],
    }
    three = run_checkpoint_sets(models, ["bmnist_h25"], n_checkpoints=3)["bmnist_h25"]
    assert [p.stem for p in three] == ["epoch_1", "epoch_3", "epoch_30"]  # first, middle, last
    for epoch in range(31, 101):
        (models / "bmnist_h25" / "checkpoints" / f"epoch_{epoch}.pt").write_bytes(b"")
    spaced = run_checkpoint_sets(models, ["bmnist_h25"])["bmnist_h25"]
    # 75 written (1 2 3 10 30 31 .. 100): 9, evenly spaced over their positions
    assert [int(p.stem.removeprefix("epoch_")) for p in spaced] == [
        1, 35, 44, 54, 63, 72, 82, 91, 100
    ]  # fmt: skip
    assert count_source("bmnist_h25", {"hidden": [{"units": 25}]}, sets) == "bmnist_h25"


def test_counts_from_must_name_a_directory(tmp_path, capsys):
    from benchmarks import run

    with pytest.raises(SystemExit):
        run.main(["paper_profile", "--no-tracking", "--counts-from", str(tmp_path / "none")])
    assert "--counts-from" in capsys.readouterr().err


def test_the_profile_takes_the_runs_overlays(tmp_path, capsys):
    """``--overlays`` lays a run's further config files over paper.yaml: with paper_cpu.yaml
    the models it leaves out have no jobs and Fig. 10's adaTAP models its epochs, and
    faces_substitute.yaml's epochs are the faces model's; a file that is not there is refused
    by name."""
    from benchmarks import run

    overlays = [ROOT / "workflow" / "config" / f"{f}.yaml"
                for f in ("sm_cd25_anchor", "paper_cpu", "faces_substitute")]  # fmt: skip
    cfg = paper_profile._paper_config(overlays)
    names = {j.name for j in paper_jobs(cfg)}
    assert {"train/bmnist_fig10_adatap3", "train/sm_cd25_h500"} <= names
    assert not {"train/sbmnist_h500", "train/bmnist_h500_noiseaug"} & names
    assert cfg["models"]["bmnist_fig10_adatap10"]["epochs"] == 43
    assert cfg["models"]["faces_h256"]["epochs"] == 15000
    assert "likelihood/score_final_sm_cd25_h500" in names
    with pytest.raises(SystemExit):
        run.main(["paper_profile", "--no-tracking", "--overlays", str(tmp_path / "no.yaml")])
    assert "no such file" in capsys.readouterr().err


def test_a_rising_k_is_priced_at_the_epochs_mean_k(monkeypatch):
    """A CD step's cost is linear in k: a k rising 1..25 every 10 epochs over 250 epochs (mean
    k 13) is priced on the line through its first and last k, at k = 13."""
    import torch

    from benchmarks import paper_prices
    from tapmachine.train import TrainSettings

    timed_k = []
    monkeypatch.setattr(
        paper_prices, "gradients", lambda machine, x, s, chains, g: timed_k.append(s.sampling_steps)
    )
    monkeypatch.setattr(
        paper_prices, "cpu_seconds", lambda fn, reps: (fn(), 2.0 + 0.5 * timed_k[-1])[1]
    )
    spec = {
        "dataset": "binary_mnist",
        "visible": {"prior": "bernoulli"},
        "hidden": [{"prior": "bernoulli", "units": 3}],
        "method": "cd",
        "sampling_steps": {"start": 1, "end": 25, "every": 10},
        "epochs": 250,
    }
    monkeypatch.setattr(paper_prices, "_loop_price", lambda *args: 0.25)
    x = torch.bernoulli(torch.full((20, 6), 0.5))
    price = paper_prices._step_price(spec, TrainSettings.from_spec(spec), x, torch.Generator(), 1)
    assert timed_k == [1, 25]
    assert price == {"batch": pytest.approx(2.0 + 0.5 * 13), "loop": 0.25}
    assert paper_profile._step_seconds(price, None) == pytest.approx(2.0 + 0.5 * 13 + 0.25)
    label = paper_profile._solver_label(TrainSettings.from_spec(spec))
    assert label == "CD-1..25"


def test_the_loop_price_times_the_training_loops_own_work_around_the_gradient(monkeypatch):
    """``_loop_price`` times, per minibatch, the functions ``run_epoch`` calls besides the
    gradient: ``present`` with the model's resampling, ``apply_update`` at step size 0 (of a
    zero gradient shaped as the method's) and ``check_finite``; the priced machine is left as
    it was."""
    import torch

    from benchmarks import paper_prices
    from tapmachine.train import TrainSettings, build_machine, loop, update

    calls = []
    real_present, real_update, real_check = loop.present, update.apply_update, update.check_finite
    monkeypatch.setattr(loop, "present", lambda x, r, g: calls.append(("present", r)) or
                        real_present(x, r, g))  # fmt: skip
    monkeypatch.setattr(update, "apply_update", lambda m, gr, v, lr, s, eta: calls.append(
        ("update", lr, sum(float(w.abs().sum()) for w in gr["weights"]))) or
        real_update(m, gr, v, lr, s, eta))  # fmt: skip
    monkeypatch.setattr(update, "check_finite", lambda m, e, b: calls.append(("check",)) or
                        real_check(m, e, b))  # fmt: skip
    spec = {"dataset": "d", "visible": {"prior": "bernoulli"},
            "hidden": [{"prior": "bernoulli", "units": 4}], "method": "cd",
            "resample": "bernoulli", "batch_size": 5, "prior_momentum": True}  # fmt: skip
    settings = TrainSettings.from_spec(spec)
    x = torch.rand(20, 6, generator=torch.Generator().manual_seed(0))
    machine = build_machine(spec, x, 0.1, torch.Generator().manual_seed(1))
    before = [w.clone() for w in machine.weights]

    seconds = paper_prices._loop_price(machine, x, settings, None, torch.Generator(), 1)

    assert seconds > 0
    assert calls[:3] == [("present", "bernoulli"), ("update", 0.0, 0.0), ("check",)]
    assert len(calls) == 3 * 11  # one warm-up call and 10 timed, each a batch's three calls
    assert all(torch.equal(w, b) for w, b in zip(machine.weights, before, strict=True))


def _counted_checkpoint(tmp_path, monkeypatch):
    """An 8 x 5 binary RBM's checkpoint, evaluated on 30 rows, whose dataset ``paper_counts``
    reads as 50 fixed binary rows: ``(spec, path)``."""
    import torch

    from benchmarks import paper_counts
    from tapmachine.io.modelfile import ModelFile
    from tapmachine.train import build_machine

    spec = {"dataset": "d", "visible": {"prior": "bernoulli"},
            "hidden": [{"prior": "bernoulli", "units": 5}], "eval": {"n_samples": 30}}  # fmt: skip
    x = torch.bernoulli(torch.full((50, 8), 0.4), generator=torch.Generator().manual_seed(0))
    path = tmp_path / "epoch_1" / "model.pt"
    path.parent.mkdir()
    machine = build_machine(spec, x, 0.3, torch.Generator().manual_seed(2))
    ModelFile.from_machine(machine, "m", spec=spec).save(path)
    monkeypatch.setattr(paper_counts, "dataset_rows", lambda name, n=None: (x[:n], name))
    return spec, path


def test_the_per_epoch_evaluation_is_timed_whole_on_its_own_rows(tmp_path, monkeypatch):
    """The counts time ``evaluate_tap_log_likelihood`` itself on the model's evaluation rows
    (``eval_rows`` of the first ``EVAL_ROWS``: at most ``eval_samples``), per row; a training
    job's evaluation is then its rows times that, and the line price only without it."""
    import itertools
    import time

    from benchmarks import paper_counts
    from tapmachine.train import TrainSettings

    spec, path = _counted_checkpoint(tmp_path, monkeypatch)
    seen = []
    real = paper_counts._solve_counts

    def counted(machine, rows, settings, curve, x_eval, *scores, **steps):
        seen.append(x_eval.shape[0])
        return real(machine, rows, settings, curve, x_eval, *scores, **steps)

    monkeypatch.setattr(paper_counts, "_solve_counts", counted)
    clock = itertools.count(0.0, 3.0)
    monkeypatch.setattr(time, "process_time", lambda: next(clock))

    counts = paper_counts.measured_iterations({"models": {"m": spec}}, ["m"], {"m": [path]})

    assert seen == [30]  # eval_samples rows, fewer than EVAL_ROWS
    assert counts["m"]["eval_seconds_per_row"] == pytest.approx(3.0 / 30)
    stub = _Stub({"models": {"m": spec}, "harvest": {}})
    stub.counts["m"]["eval_seconds_per_row"] = 0.5
    detail = paper_profile.train_seconds(stub, "m", spec)
    assert detail["eval_seconds_per_epoch"] == pytest.approx(10 * 0.5)  # the stub's 10 rows
    del stub.counts["m"]["eval_seconds_per_row"]
    line = paper_profile.train_seconds(stub, "m", spec)["eval_seconds_per_epoch"]
    assert line == pytest.approx(10 * (1.0 + 1.0 * 9))  # one + per_iter (10 - 1), per row
    assert TrainSettings.from_spec(spec).eval_samples == 30


def test_a_scores_tap_log_partition_is_timed_on_its_own_initialisations(tmp_path, monkeypatch):
    """A score job that solves TAP's ln Z itself (its settings are not training's evaluation)
    has that solve (``tap_log_partition``) timed on the first ``SCORE_ROWS`` of its
    ``tap_inits``, per row; the job is then its initialisations times that, and a score that
    reads training's record pays none."""
    import itertools
    import time

    from benchmarks import paper_counts
    from tapmachine.tap_paper import likelihood

    spec, path = _counted_checkpoint(tmp_path, monkeypatch)
    solved = []
    real = likelihood.tap_log_partition
    monkeypatch.setattr(likelihood, "tap_log_partition", lambda m, rows, s: solved.append(
        (rows.shape[0], s.tap_inits)) or real(m, rows, s))  # fmt: skip
    clock = itertools.count(0.0, 3.0)
    monkeypatch.setattr(time, "process_time", lambda: next(clock))
    score = likelihood.ScoreSettings.from_config({"tap_inits": 40}, spec)
    scored = {"m": {"table": score}}

    counts = paper_counts.measured_iterations({"models": {"m": spec}}, ["m"], {"m": [path]},
                                              scored=scored)  # fmt: skip

    assert solved == [(40, 40)]  # its tap_inits, fewer than SCORE_ROWS
    assert counts["m"]["score_tap_seconds_per_row_table"] == pytest.approx(3.0 / 40)


def test_a_score_job_pays_its_timed_tap_solve_unless_it_reads_trainings(paper_cfg):
    scored = paper_profile._scores_solving_tap(paper_cfg)
    anchor_like = next(j for j in paper_jobs(paper_cfg)
                       if j.kind == "score_final" and j.model in scored)  # fmt: skip
    stub = _Stub(paper_cfg)
    stub.counts[anchor_like.model]["score_tap_seconds_per_row_table"] = 0.5
    seconds, detail = paper_profile._work_seconds(stub, paper_cfg, anchor_like)
    tap_inits = paper_cfg["likelihood"]["table"]["tap_inits"]
    assert detail["tap_if_solved"] == pytest.approx(tap_inits * 0.5)
    assert not detail["tap_reused"]
    assert seconds == pytest.approx(detail["ais"] + detail["pl"] + tap_inits * 0.5)
    for job in paper_jobs(paper_cfg):
        if job.kind in paper_profile.SCORE_PARTS and job.model not in scored:
            assert paper_profile._work_seconds(stub, paper_cfg, job)[1]["tap_reused"]


def test_the_pseudo_likelihood_is_priced_as_the_jobs_score_it(monkeypatch):
    """Per image over every row given, scored in one call: Fig. 10's curves with each image's
    sites drawn beforehand (``sites`` a rows x n_sites tensor, the draw untimed), Fig. 12's
    scores drawing them in the call (``n_sites`` and the generator)."""
    import torch

    from benchmarks import paper_prices
    from tapmachine.core import estimators

    seen = []

    def scored(machine, x, n_sites=None, generator=None, sites=None):
        seen.append((x.shape[0], n_sites, sites))

    monkeypatch.setattr(estimators, "pseudo_log_likelihood", scored)
    monkeypatch.setattr(paper_prices, "cpu_seconds", lambda fn, reps: (fn(), 6.0)[1])
    g = torch.Generator().manual_seed(0)
    rbm = paper_prices._binary_rbm(30, 4, g)
    x = torch.bernoulli(torch.full((12, 30), 0.5), generator=g)

    assert paper_prices.pl_price(rbm, x, 5, g, quick=True) == pytest.approx(6.0 / 12)
    rows, n_sites, sites = seen[-1]
    assert rows == 12 and n_sites is None and sites.shape == (12, 5)
    assert paper_prices.pl_price(rbm, x, 5, g, quick=True, drawn_once=False) == 0.5
    assert seen[-1] == (12, 5, None)
    assert paper_prices.pl_rows(quick=False) == paper_prices.PL_ROWS["full"]


def test_a_converged_step_is_priced_by_its_sweeps_and_the_rows_they_sweep(monkeypatch):
    """A solve of n rows and k sweeps costing 0.3 + k (0.2 + 0.01 n) gives per_sweep 0.2 and
    per_row_sweep 0.01 (timed at K = 100 and 10 rows); a step whose slowest row takes 50 sweeps
    and whose sweeps swept 2,000 rows costs one + 0.2 x 49 + 0.01 x 1,900, and when every row
    takes k sweeps the price is the line at k."""
    import torch

    from benchmarks import paper_prices
    from tapmachine.train import TrainSettings

    solves = []
    monkeypatch.setattr(
        paper_prices.tap,
        "solve",
        lambda machine, x, max_iter, **kw: solves.append((x.shape[0], max_iter)),
    )
    monkeypatch.setattr(
        paper_prices,
        "cpu_seconds",
        lambda fn, reps: (fn(), 0.3 + solves[-1][1] * (0.2 + 0.01 * solves[-1][0]))[1],
    )
    spec = {"batch_size": 100, "n_solutions": 100, "train_iterations": "converge"}
    settings = TrainSettings.from_spec(spec)
    sweep = paper_prices._sweep_price(None, torch.zeros(30, 4), settings, 1)
    assert {n for n, _ in solves} == {100, 10}
    assert sweep == {
        "per_sweep": pytest.approx(0.2),
        "per_row_sweep": pytest.approx(0.01),
        "rows": 100,
        "solve_one": pytest.approx(0.3 + 0.2 + 0.01 * 100),  # the first sweep of all K rows
    }
    step = {"one": 1.5, "per_iter": 0.2 + 0.01 * 100, **sweep}
    counts = {"train": 20.0, "train_sweeps": 50.0, "train_row_sweeps": 2000.0}
    assert paper_profile._step_seconds(step, 20.0, counts) == pytest.approx(
        1.5 + 0.2 * 49 + 0.01 * 1900
    )
    alike = {"train": 7.0, "train_sweeps": 7.0, "train_row_sweeps": 700.0}
    assert paper_profile._step_seconds(step, 7.0, alike) == pytest.approx(1.5 + 1.2 * 6)
    # counts without sweeps (an older count): the line at the mean iterations
    assert paper_profile._step_seconds(step, 20.0, {"train": 20.0}) == pytest.approx(1.5 + 1.2 * 19)
    # the step's own solve, timed on the count checkpoints, replaces the one-sweep solve in `one`
    step["one"] = 2.0  # a step at one sweep: its solve (solve_one, 1.5) and 0.5 of other work
    timed = {**counts, "train_solve_seconds": 4.0}
    assert paper_profile._step_seconds(step, 20.0, timed) == pytest.approx(0.5 + 4.0)


def test_a_converged_steps_solve_is_counted_and_timed_over_batches(tmp_path, monkeypatch):
    """The counts run training's own solve (``solve_for_gradient``, training's tolerance, cap
    and solver) from each of ``STEP_BATCHES`` batches of K rows, and give the means over the
    batches of the iterations per row, the slowest row's sweeps, the rows swept and the CPU
    seconds of the solve."""
    import itertools
    import time

    from benchmarks import paper_counts
    from tapmachine.core import tap
    from tapmachine.train import TrainSettings, load_model, tap_gradient

    spec, path = _counted_checkpoint(tmp_path, monkeypatch)
    spec = {**spec, "n_solutions": 10, "batch_size": 10, "tap": {"train_iterations": "converge",
            "train_tol": 1e-6, "train_max_iter": 300, "solver": "newton_sor"}}  # fmt: skip
    settings = TrainSettings.from_spec(spec)
    seen = []
    real = tap_gradient.solve_for_gradient

    def recorded(machine, init, solver, inference="tap"):
        seen.append((init.clone(), solver))
        return real(machine, init, solver, inference)

    monkeypatch.setattr(tap_gradient, "solve_for_gradient", recorded)
    clock = itertools.count(0.0, 3.0)
    monkeypatch.setattr(time, "process_time", lambda: next(clock))
    counts = paper_counts.measured_iterations({"models": {"m": spec}}, ["m"], {"m": [path]})["m"]

    x = paper_counts.dataset_rows("d", 50)[0]
    steps = [(init, solver) for init, solver in seen if init.shape[0] == 10]
    assert len(steps) == paper_counts.STEP_BATCHES == 5
    for b, (init, solver) in enumerate(steps):
        assert torch.equal(init, x[10 * b : 10 * (b + 1)])
        assert (solver.tol, solver.max_iter, solver.solver) == (1e-6, 300, "newton_sor")
    machine = load_model(path)
    states = [
        tap.solve(machine, init, damping=s.damping, tol=s.tol, max_iter=s.max_iter,
                  solver=s.solver, relaxation=s.relaxation)
        for init, s in steps
    ]  # fmt: skip
    its = [s.iterations for s in states]
    assert counts["train"] == pytest.approx(sum(float(i.double().mean()) for i in its) / 5)
    assert counts["train_sweeps"] == pytest.approx(sum(float(i.max()) for i in its) / 5)
    swept = [sum(tap.working_set_sizes(i.tolist())) for i in its]
    assert counts["train_row_sweeps"] == pytest.approx(sum(swept) / 5)
    assert counts["train_solve_seconds"] == pytest.approx(3.0)  # one clock tick per solve
    assert settings.relaxation == steps[0][1].relaxation


def test_training_is_priced_on_a_counted_checkpoint_of_the_same_machine(tmp_path, monkeypatch):
    """A model whose count source is a machine of its sizes and priors is priced on that
    source's latest checkpoint (a trained truncated prior sweeps at another cost than a fresh
    one); other hidden sizes, other priors or a deep machine with pretraining are priced on a
    fresh machine."""
    import torch

    from benchmarks import paper_prices
    from tapmachine.io.modelfile import ModelFile
    from tapmachine.train import build_machine

    spec = {
        "dataset": "real_mnist",
        "visible": {"prior": "truncated_gauss_bernoulli"},
        "hidden": [{"prior": "bernoulli", "units": 6}],
    }
    x = torch.rand(40, 16, generator=torch.Generator().manual_seed(0))
    machine = build_machine(spec, x, 0.05, torch.Generator().manual_seed(1))
    paths = []
    for epoch in (1, 2):
        path = tmp_path / f"epoch_{epoch}" / "model.pt"  # load_model reads model.pt by name
        path.parent.mkdir()
        ModelFile.from_machine(machine, "m", spec=spec).save(path)
        paths.append(path)
    meas = object.__new__(paper_profile.Measurements)
    meas.quick, meas._training, meas._priced_on = True, {}, {}
    meas.counts = {"m": {"source": "m"}, "other": {"source": "m"}}
    meas.sets = {"m": paths}
    priced = []
    monkeypatch.setattr(
        paper_prices,
        "training_price",
        lambda spec, quick, machine=None: priced.append(machine) or {"step": {}},
    )
    assert meas._pricing_checkpoint(spec, "m") == paths[-1]
    assert meas.training(spec, "m")["priced_on"] == str(paths[-1])
    assert priced[-1] is not None and priced[-1].sizes == (16, 6)
    wider = {**spec, "hidden": [{"prior": "bernoulli", "units": 7}]}
    binary = {**spec, "visible": {"prior": "bernoulli"}}
    deep = {**spec, "pretrain": {"epochs": 1}}
    for other in (wider, binary, deep):
        assert meas._pricing_checkpoint(other, "other") is None
    assert meas._pricing_checkpoint(spec, None) is None
    assert meas.training(binary, "other")["priced_on"] is None and priced[-1] is None


def test_a_harvest_is_costed_by_timing_the_harvest_itself(tmp_path, monkeypatch):
    """``harvest_costs`` runs each harvest with its own settings on the first rows of its
    count checkpoints: the iterations are that harvest's mean (both passes and the polishing),
    the seconds per initialisation the CPU time it took over the rows, and a job's
    initialisations the entry's ``n_init``, at most the dataset's images; a job is then
    projected as their product."""
    import itertools
    import time

    import torch

    from benchmarks import paper_counts
    from tapmachine.io.modelfile import ModelFile
    from tapmachine.tap_paper import harvest as harvest_module
    from tapmachine.train import build_machine, load_model

    spec = {"dataset": "d", "visible": {"prior": "bernoulli"},
            "hidden": [{"prior": "bernoulli", "units": 6}]}  # fmt: skip
    x = torch.bernoulli(torch.full((40, 16), 0.3), generator=torch.Generator().manual_seed(0))
    machine = build_machine(spec, x, 0.5, torch.Generator().manual_seed(1))
    path = tmp_path / "epoch_1" / "model.pt"
    path.parent.mkdir()
    ModelFile.from_machine(machine, "m", spec=spec).save(path)
    monkeypatch.setattr(paper_counts, "dataset_rows", lambda name, n=None: (x[:n], name))
    entry = {"epochs": [1], "n_init": 30, "max_iter": 200}
    cfg = {"models": {"m": spec, "all": spec}, "harvest": {"m": entry, "all": {"epochs": [1]}}}
    settings = harvest_module.HarvestSettings(n_init=30, max_iter=200)
    trained = load_model(path, dtype=torch.float64)
    arrays = harvest_module.harvest(trained, x[:30].double(), settings)
    expected = float((arrays["iterations"] + arrays["polish_iterations"]).mean())
    clock = itertools.count(0.0, 3.0)  # each reading 3 CPU seconds after the last
    monkeypatch.setattr(time, "process_time", lambda: next(clock))

    costs = paper_counts.harvest_costs(cfg, {"m": [path], "all": [path]}, quick=True)

    assert costs["m"]["iterations"] == pytest.approx(expected) and expected > 1
    assert costs["m"]["rows"] == 30 and costs["m"]["inits"] == 30
    assert costs["m"]["seconds_per_init"] == pytest.approx(3.0 / 30)
    assert costs["all"]["inits"] == 40 and costs["all"]["rows"] == 40  # n_init None: every image
    assert paper_counts.harvest_rows(settings, quick=False) == 30
    big = harvest_module.HarvestSettings(n_init=10000)
    assert paper_counts.harvest_rows(big, quick=False) == paper_counts.HARVEST_ROWS["full"]
    meas = object.__new__(paper_profile.Measurements)
    meas.harvest, meas.start = costs, 0.75
    seconds, detail = paper_profile.job_seconds(
        meas, cfg, Job("harvest/m/epoch_1", "harvest", "m", 1)
    )
    assert seconds == pytest.approx(30 * 3.0 / 30 + 0.75) and detail["start"] == 0.75


def test_a_job_start_is_timed_in_a_fresh_interpreter():
    """The start price is the CPU time of a real fresh interpreter importing torch and MLflow
    and logging a run: more than importing torch alone in one (a quarter of a second at least
    here), and well under a minute."""
    import resource
    import subprocess

    from benchmarks import paper_prices

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", "import torch"], check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    torch_alone = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)

    start = paper_prices.job_start_price()

    assert torch_alone < start < 60.0


def test_benchmark_checkpoints_a_run_covers_are_not_trained(tmp_path, monkeypatch):
    """With a run that has checkpoints of every binary-MNIST size, the binary benchmark
    checkpoints are not trained (the others still are, for the models the run lacks); with
    every other dataset's model too, nothing is trained."""
    from benchmarks import paper_counts
    from benchmarks.checkpoints import OTHER_MODELS, SOLVE_MODELS

    trained = []
    monkeypatch.setattr(
        paper_counts, "solve_checkpoints", lambda d, q: trained.append("solve") or []
    )
    monkeypatch.setattr(
        paper_counts, "other_checkpoints", lambda d, specs, q: trained.append("other") or {}
    )
    cfg = {"models": {name: {} for name in (*SOLVE_MODELS, *OTHER_MODELS)}}
    models = tmp_path / "models"

    def write(name):
        path = models / name / "checkpoints" / "epoch_1.pt"
        path.parent.mkdir(parents=True)
        path.write_bytes(b"")

    for name in SOLVE_MODELS:
        write(name)
    sets = paper_counts.checkpoint_sets(cfg, tmp_path / "bench", False, models)
    assert trained == ["other"] and set(sets) == set(SOLVE_MODELS)
    for name in OTHER_MODELS:
        write(name)
    trained.clear()
    sets = paper_counts.checkpoint_sets(cfg, tmp_path / "bench", False, models)
    assert trained == [] and set(sets) == {*SOLVE_MODELS, *OTHER_MODELS}
    trained.clear()
    paper_counts.checkpoint_sets(cfg, tmp_path / "bench", False, None)
    assert trained == ["solve", "other"]


def test_a_gpu_projection_is_refused_rather_than_priced_on_the_cpu(capsys):
    """paper_profile prices CPU seconds of one thread: asked for CUDA it says it has no such
    projection instead of printing CPU prices labelled with the GPU."""
    from benchmarks import run

    with pytest.raises(SystemExit) as stop:
        run.main(["--device", "cuda", "--no-tracking", "paper_profile"])
    assert stop.value.code == 2
    assert "no cuda projection" in capsys.readouterr().err
    with pytest.raises(ValueError, match="not cuda"):
        paper_profile.bench_paper_profile("cuda", quick=True)


def test_a_runs_greedy_rbms_count_the_pretraining_of_its_deep_machine(tmp_path, monkeypatch):
    """A deep model whose run has written greedy RBM checkpoints (``pretrain/layer_k``) counts
    each RBM's converged step on them: layer 1 from the model's rows, layer 2 from the hidden
    means of layer 1's last RBM (``pretrain.inputs``); the training job prices each layer's
    steps at its own counts and says so, and the layers without checkpoints at the deep
    machine's."""
    import torch

    from benchmarks import paper_counts, paper_profile
    from tapmachine.core.machine import BoltzmannMachine
    from tapmachine.core.priors import Bernoulli
    from tapmachine.io.modelfile import ModelFile
    from tapmachine.train import TrainSettings, load_model
    from tapmachine.train.pretrain import PretrainSettings, layer_inputs, pretrain

    g = torch.Generator().manual_seed(0)
    x = torch.bernoulli(torch.full((40, 8), 0.4), generator=g)
    machine = BoltzmannMachine(
        tuple(Bernoulli(torch.zeros(n)) for n in (8, 5, 3)),
        (0.5 * torch.randn(8, 5, generator=g), 0.5 * torch.randn(5, 3, generator=g)),
    )
    tap_spec = {"train_iterations": "converge", "train_tol": 1e-8, "train_max_iter": 200,
                "solver": "newton_sor"}  # fmt: skip
    spec = {"dataset": "d", "visible": {"prior": "bernoulli"}, "n_solutions": 10,
            "hidden": [{"prior": "bernoulli", "units": 5}, {"prior": "bernoulli", "units": 3}],
            "batch_size": 10, "learning_rate": 0.05, "epochs": 2, "tap": tap_spec,
            "pretrain": {"epochs": 3, "learning_rate": 0.5}, "eval": {"n_samples": 10}}  # fmt: skip
    models = tmp_path / "models"
    settings = TrainSettings.from_spec(spec)
    pre = PretrainSettings.from_spec(spec["pretrain"])
    stacked, _ = pretrain(machine, x, settings, pre, g, models / "dbm" / "pretrain", progress=False)
    monkeypatch.setattr(paper_counts, "dataset_rows", lambda name, n=None: (x[:n], name))

    sets = paper_counts.run_checkpoint_sets(models, ["dbm"], n_checkpoints=2)
    assert {k: [p.stem for p in v] for k, v in sets.items()} == {
        "dbm/pretrain/layer_1": ["epoch_1", "epoch_3"],
        "dbm/pretrain/layer_2": ["epoch_1", "epoch_3"],
    }
    joint = tmp_path / "joint" / "model.pt"  # the stacked machine stands in for joint training
    joint.parent.mkdir()
    ModelFile.from_machine(stacked, "dbm", spec=spec).save(joint)
    sets["dbm"] = [joint]
    counts = paper_counts.measured_iterations({"models": {"dbm": spec}}, ["dbm"], sets)["dbm"]

    rbm_settings = TrainSettings.from_spec({**spec, "learning_rate": 0.5, "epochs": 3})
    steps = x[: 10 * paper_counts.STEP_BATCHES]
    first = [load_model(p, dtype=torch.float32) for p in sets["dbm/pretrain/layer_1"]]
    second = [load_model(p, dtype=torch.float32) for p in sets["dbm/pretrain/layer_2"]]
    inputs = layer_inputs(first[-1], steps)
    for layer, rbms, rows in ((1, first, steps), (2, second, inputs)):
        expected = [paper_counts._step_counts(rbm, rows, rbm_settings) for rbm in rbms]
        mean = sum(c["train"] for c in expected) / len(expected)
        assert counts["pretrain"][layer]["train"] == pytest.approx(mean)
        assert counts["pretrain"][layer]["train_sweeps"] == pytest.approx(
            sum(c["train_sweeps"] for c in expected) / len(expected)
        )
    assert counts["pretrain"][1]["train"] != counts["pretrain"][2]["train"]

    class Priced:
        def __init__(self, own):
            self.counts = {"dbm": {**counts, "pretrain": own}}

        def training(self, spec, name=None):
            flat = {"one": 1.0, "per_iter": 0.5}
            return {"n_rows": 40, "step": dict(flat), "eval": None, "eval_rows": 0,
                    "data": "stub", "pretrain": [dict(flat), dict(flat)]}  # fmt: skip

    both = paper_profile.train_seconds(Priced(counts["pretrain"]), "dbm", spec)
    only_first = paper_profile.train_seconds(Priced({1: counts["pretrain"][1]}), "dbm", spec)
    assert both["pretrain_counted_on_own"] == [1, 2]
    assert only_first["pretrain_counted_on_own"] == [1]

    def layer_seconds(iterations):
        return 3 * 4 * (1.0 + 0.5 * (iterations - 1))  # 3 epochs x 4 batches of 10 rows

    own = [layer_seconds(counts["pretrain"][k]["train"]) for k in (1, 2)]
    assert both["pretrain_seconds"] == pytest.approx(sum(own))
    assert only_first["pretrain_seconds"] == pytest.approx(own[0] + layer_seconds(counts["train"]))


def test_the_evaluation_is_priced_only_at_the_epochs_it_is_due(paper_cfg):
    """``eval.every`` N evaluates every N-th epoch and the last (``evaluation_due``): 100 epochs
    at every 30 pay 4 evaluations (30, 60, 90, 100), not 100; the steps stay every epoch's."""
    import copy

    spec = copy.deepcopy(paper_cfg["models"]["bmnist_h25"])
    stub = _Stub({"models": {"m": spec}, "harvest": {}})
    every_epoch = paper_profile.train_seconds(stub, "m", {**spec, "epochs": 100})
    spec["eval"] = {**spec.get("eval", {}), "every": 30}
    sparse = paper_profile.train_seconds(stub, "m", {**spec, "epochs": 100})
    assert every_epoch["evaluated_epochs"] == 100 and sparse["evaluated_epochs"] == 4
    per_eval = sparse["eval_seconds_per_epoch"]
    assert per_eval > 0
    assert every_epoch["seconds"] - sparse["seconds"] == pytest.approx(96 * per_eval)


def test_a_run_of_some_targets_is_priced_with_their_jobs_alone(tmp_path, capsys, monkeypatch):
    """``--targets`` prices the jobs those targets make: the faces' Figs. 3-7 are the faces'
    training and the harvests their figures read, and no benchmark checkpoint of another
    model is trained for them when the run covers the faces; ``harvest`` adds every harvest
    entry's epochs; a name that is no target is refused."""
    from benchmarks import paper_counts, run
    from benchmarks.paper_jobs import _figure_epochs

    names = ("sm_cd25_anchor", "paper_cpu", "faces_substitute", "paper_faces")
    cfg = paper_profile._paper_config([ROOT / "workflow" / "config" / f"{f}.yaml" for f in names])
    figures = ("fig3", "fig4", "fig5", "fig6", "fig7")
    result = paper_profile.project(_Stub(cfg), cfg, figures)
    epochs = {e for fig in ("fig5", "fig6", "fig7") for e in _figure_epochs(cfg, fig)["faces_h256"]}
    assert set(result["jobs_hours"]) == {
        "train/faces_h256",
        *(f"harvest/faces_h256/epoch_{e}" for e in epochs),
    }
    with_harvest = paper_profile.project(_Stub(cfg), cfg, (*figures, "harvest"))
    assert "harvest/bmnist_h100/epoch_1" in with_harvest["jobs_hours"]

    trained = []
    monkeypatch.setattr(paper_counts, "solve_checkpoints", lambda d, q: trained.append("s") or [])
    monkeypatch.setattr(
        paper_counts, "other_checkpoints", lambda d, specs, q: trained.append(sorted(specs)) or {}
    )
    models = tmp_path / "models"
    path = models / "faces_h256" / "checkpoints" / "epoch_30.pt"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")
    sets = paper_counts.checkpoint_sets(cfg, tmp_path / "bench", False, models, ["faces_h256"])
    assert trained == [] and set(sets) == {"faces_h256"}
    paper_counts.checkpoint_sets(cfg, tmp_path / "bench", False, None, ["faces_h256"])
    assert trained == [["faces_h256"]]  # the faces' own benchmark checkpoints, nothing else
    trained.clear()
    paper_counts.checkpoint_sets(cfg, tmp_path / "bench", False, models, ["bmnist_h500_cd1"])
    assert trained == ["s"]  # borrows bmnist_h500's counts, which the run does not have

    with pytest.raises(SystemExit):
        run.main(["paper_profile", "--no-tracking", "--targets", "fig3", "fig13"])
    assert "fig13" in capsys.readouterr().err

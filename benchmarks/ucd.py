"""``ucd_coupling`` and ``ucd_train_step``: the second paper's UCD-LMI estimate of grad ln Z
and one UCD-LMI training step of a DBM."""

from __future__ import annotations

import time

import torch

from benchmarks.common import binary_mnist, matmul_gflops, sync

__all__ = ["UCD_STEP", "UCD_WARMUP_STEPS", "bench_ucd_coupling", "bench_ucd_train_step"]


def bench_ucd_coupling(device, quick: bool) -> dict:
    """UCD-LMI estimate of grad ln Z for a 784 x 500 RBM from 1,000 chains (second paper, Alg. 2).

    The machine is initialised as the paper trains it (spin units, orthogonal W, Logistic(0, 0.5)
    biases). One estimate = local search (Alg. 1) + one Gibbs sweep + the MH coupling (Alg. 3) of
    the marginalised estimator (eq. 27, the default ``UCDSettings``); the plain estimator (eq. 11)
    is timed too. Operation count (matmuls only, per chain, in units of Nv Nh): local search
    4 per step (two fields per step), the Gibbs sweep 4, and per marginalised target the energy of
    X_0 and of the first proposal (2 + 2), the statistic f(X_0) (2 for the conditional mean of the
    summed layer, 2 for the outer product) and 10 per further coupling step (tau - 1, bounded by
    the larger tau of the two targets). ``corrected_fraction``: chains whose estimate has a
    correction term (tau > 1).
    """
    from tapmachine import ucd
    from tapmachine.core.seeding import seeded_generator

    nv, nh = 784, 500
    chains = 200 if quick else 1000
    repeats = 2 if quick else 5
    machine = ucd.random_machine([nv, nh], seeded_generator(0, "bench_ucd")).to(device=device)
    g = seeded_generator(0, "bench_ucd", "chains", device=device)
    out = {}
    for label, settings in (
        ("marginalised", ucd.UCDSettings()),
        ("plain", ucd.UCDSettings(marginalise=False)),
    ):
        ucd.model_expectation(machine, chains, settings, g)  # warm-up
        best, est = float("inf"), None
        for _ in range(repeats):
            sync(device)
            t0 = time.perf_counter()
            est = ucd.model_expectation(machine, chains, settings, g)
            sync(device)
            best = min(best, time.perf_counter() - t0)
        targets = 2 if settings.marginalise else 1
        per_target = 8 if settings.marginalise else 6
        units = (
            4 * float(est.steps.sum())
            + 4 * chains
            + targets * (per_target * chains + 10 * float((est.tau - 1).sum()))
        )
        out[label] = {
            "seconds": best,
            "gflops": units * nv * nh / best / 1e9,
            **est.summary(),
        }
    ref = matmul_gflops(chains, nv, nh, device)
    main = out["marginalised"]
    return {
        "name": "ucd_coupling",
        "seconds": main["seconds"],
        "gflops": main["gflops"],
        "ratio_to_matmul": main["gflops"] / ref,
        "matmul_gflops": ref,
        "chains": chains,
        "T_mean": main["T_mean"],
        "tau_mean": main["tau_mean"],
        "corrected_fraction": main["corrected_fraction"],
        "plain_seconds": out["plain"]["seconds"],
        "plain_ratio_to_matmul": out["plain"]["gflops"] / ref,
        "plain_tau_mean": out["plain"]["tau_mean"],
        "plain_corrected_fraction": out["plain"]["corrected_fraction"],
    }


#: Layer sizes and batch of ``ucd_train_step`` (``--ucd-sizes``, ``--ucd-batch``).
UCD_STEP = {"sizes": [784, 784, 784], "batch": 1000}
#: Training steps run before ``ucd_train_step`` times one: T falls over the first steps of a
#: fresh machine, so the step time depends on when it is taken; the benchmark states this point.
UCD_WARMUP_STEPS = 20
#: Rounds of (matmul reference, 10 timed sweeps): both rates are the best over all rounds.
SWEEP_ROUNDS = 5


def bench_ucd_train_step(device, quick: bool) -> dict:
    """One UCD-LMI training step of a DBM (default 784-784-784, batch 1,000; Alg. 2), timed after
    ``UCD_WARMUP_STEPS`` steps at lr 1e-3 from the initial machine, with the tau and T of the
    timed steps and the seconds of one local-search sweep beside it.

    A step = the positive phase (one posterior coupling per row, eq. 28) + the negative phase
    (``batch`` joint couplings, eq. 11), both marginalised (eq. 27), and the SGD update, through
    the training loop's own functions. Operation count (matmuls only, 2 flops per multiply-add),
    in units of S = Nv N1 + N1 N2 (all couplings once) per chain: local search 2 per step (each
    block update computes the fields of its layers), the Gibbs sweep 2, per marginalised target
    about 4 for the energies and statistics of X_0 and 10 per further coupling step (tau - 1).
    The local-search sweep (both block updates of ``batch`` chains, 2 S per chain) is timed alone
    (best of ``SWEEP_ROUNDS`` x 10, each round after a timing of the matmul reference, so that a
    load on the machine that comes and goes reaches both): its rate over the best matmul rate on
    (batch x Nv) @ (Nv x N1) is the goal ratio (>= 0.8).
    The paper's size (6,272-6,272-6,272, batch 1,000) is projected unless run (``--ucd-sizes``):
    memory per step = weights + velocity + gradient (3 x 4 bytes per coupling) + the states of
    both phases (float32), and hours for 100,000 steps = measured seconds x (paper S / this S) x
    100,000.
    """
    from tapmachine.core.seeding import seeded_generator
    from tapmachine.train import TrainSettings
    from tapmachine.train.update import apply_update
    from tapmachine.ucd import Target, block_update, dbm

    sizes = list(UCD_STEP["sizes"])
    batch = 200 if quick else UCD_STEP["batch"]
    repeats = 2 if quick else 3
    warmup = 3 if quick else UCD_WARMUP_STEPS
    lr = 1e-3
    g = seeded_generator(0, "bench_ucd_train")
    opts = dbm.DBMOptions()
    machine = dbm.build_dbm(sizes, g, opts, 0.01).to(device=device)
    g = seeded_generator(0, "bench_ucd_train", "steps", device=device)
    x, _ = binary_mnist(batch)
    if x.shape[1] != sizes[0]:  # the 8-bit layout's width, or a stand-in: random rows
        x = (torch.rand(batch, sizes[0], generator=torch.Generator().manual_seed(0)) < 0.2).float()
    x = dbm.data_for(machine, x.to(device))
    settings = TrainSettings(
        batch_size=batch, learning_rate=lr, momentum=0.0, l2=0.0, method="ucd_lmi"
    )
    state = dbm.init_state(machine, x, "ucd_lmi", opts, batch, g)
    velocity = [torch.zeros_like(W) for W in machine.weights]

    def step(m):
        grads = dbm.gradients(m, x, "ucd_lmi", opts, state, 1, g)
        return apply_update(m, grads, velocity, lr, settings)

    t_warm = time.perf_counter()
    for _ in range(warmup):
        machine = step(machine)
    sync(device)
    t_warm = time.perf_counter() - t_warm
    times, taus, Ts = [], [], []
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        machine = step(machine)
        sync(device)
        times.append(time.perf_counter() - t0)
        taus.append(state.metrics["tau_mean"])
        Ts.append(state.metrics["T_mean"])
    best = min(times)
    mt = state.metrics
    # one local-search sweep of `batch` joint chains (both block updates), timed alone, in rounds
    # interleaved with the matmul reference so that both see the same load of the machine
    target = Target.joint(machine)
    chains = target.uniform(target.blank(batch), g)
    block_update(target, block_update(target, chains, 0), 1)  # warm-up
    sweep_seconds, ref = float("inf"), 0.0
    for _ in range(SWEEP_ROUNDS):
        ref = max(ref, matmul_gflops(batch, sizes[0], sizes[1], device, repeats=10))
        for _ in range(10):
            sync(device)
            t0 = time.perf_counter()
            chains = block_update(target, block_update(target, chains, 0), 1)
            sync(device)
            sweep_seconds = min(sweep_seconds, time.perf_counter() - t0)
    S = sum(a * b for a, b in zip(sizes, sizes[1:], strict=False))
    per_chain = 2 * (mt["pos_T_mean"] + mt["neg_T_mean"]) + 2 * 2 + 2 * 2 * 4
    per_chain += 2 * 10 * ((mt["pos_tau_mean"] - 1) + (mt["neg_tau_mean"] - 1))
    flops = 2.0 * per_chain * batch * S
    gflops = flops / best / 1e9
    sweep_gflops = 2.0 * 2 * batch * S / sweep_seconds / 1e9
    paper = [6272, 6272, 6272]
    S_paper = paper[0] * paper[1] + paper[1] * paper[2]
    mem_paper = 3 * 4 * S_paper + 4 * 1000 * sum(paper) * 2 * 3
    return {
        "name": "ucd_train_step",
        "sizes": sizes,
        "batch": batch,
        "warmup_steps": warmup,
        "warmup_seconds": t_warm,
        "learning_rate": lr,
        "seconds": best,
        "seconds_mean": sum(times) / len(times),
        "gflops": gflops,
        "ratio_to_matmul": gflops / ref,
        "matmul_gflops": ref,
        "tau_mean": sum(taus) / len(taus),
        "T_mean": sum(Ts) / len(Ts),
        "pos_T_mean": mt["pos_T_mean"],
        "neg_T_mean": mt["neg_T_mean"],
        "corrected_fraction": mt["corrected_fraction"],
        "sweep_seconds": sweep_seconds,
        "sweep_gflops": sweep_gflops,
        "sweep_ratio_to_matmul": sweep_gflops / ref,
        "paper_sizes": paper,
        "paper_memory_per_step_gb": mem_paper / 1e9,
        "paper_projected_hours_100k_steps": best * (S_paper / S) * 100_000 / 3600,
    }

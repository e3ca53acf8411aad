"""UCD-LMI units, the random block order of Alg. 2's Gibbs sweep, and the Fig. 2 diversity
measures, against enumeration and hand-made sets (chi-square tests at level 1e-3, fixed seeds)."""

import itertools

import pytest
import torch
from scipy import stats
from torch.nn.functional import logsigmoid

from tapmachine import ucd
from tapmachine.ucd import Target, diversity
from tapmachine.ucd.init import spin_to_binary

DT = torch.float64


def gen(seed):
    return torch.Generator().manual_seed(seed)


def bit_states(sizes):
    """Every {0, 1} configuration of the layers, as a list of per-layer (2^N, n_l) tensors."""
    rows = torch.tensor(list(itertools.product([0.0, 1.0], repeat=sum(sizes))), dtype=DT)
    return list(torch.split(rows, list(sizes), dim=1))


def test_spin_and_binary_parametrisations_give_the_same_distribution():
    """s = 2b - 1: the {0, 1} machine (4W, 2U - 2W1 - 2W^T1) has the spin machine's law."""
    sizes = (3, 2, 3)
    spin = ucd.random_machine(sizes, gen(0), units="spin", gain=1.5, dtype=DT)
    binary = spin_to_binary(spin)
    bits = bit_states(sizes)
    p_spin = torch.softmax(-spin.energy([2 * b - 1 for b in bits]), 0)
    p_binary = torch.softmax(-binary.energy(bits), 0)
    torch.testing.assert_close(p_binary, p_spin, rtol=0, atol=1e-12)
    assert float(p_spin.max()) > 4.0 / p_spin.numel()  # far from uniform: the check has teeth
    torch.testing.assert_close(binary.weights[0], 4.0 * spin.weights[0])


def test_spin_to_binary_needs_spins():
    m = ucd.random_machine((3, 2), gen(1), units="binary", dtype=DT)
    with pytest.raises(ValueError, match="Spin"):
        spin_to_binary(m)


def _sweep_probabilities(m, x0, first):
    """Exact law of one block Gibbs sweep from ``x0`` (one chain), block ``first`` first."""
    states = [2 * b - 1 for b in bit_states(m.sizes)]
    n = states[0].shape[0]
    current = [x.expand(n, -1) for x in x0]
    logp = torch.zeros(n, dtype=DT)
    for parity in (first, 1 - first):
        for l in range(parity, m.n_layers, 2):
            field = m.priors[l].U + m.input_to(l, current)
            logp = logp + logsigmoid(2.0 * field * states[l]).sum(1)
            current = list(current)
            current[l] = states[l]
    return logp.exp()


def _cells(m, xs):
    code = torch.zeros(xs[0].shape[0], dtype=torch.long)
    for x in xs:
        for j in range(x.shape[1]):
            code = code * 2 + (x[:, j] > 0).long()
    return torch.bincount(code, minlength=2 ** sum(m.sizes)).double()


@pytest.mark.parametrize("random_order", [False, True])
def test_gibbs_sweep_block_order(random_order):
    """Fixed order: the odd-first sweep's exact law. Random order (Alg. 1's u per chain): the
    half-half mixture of the two orders; the test also shows the two laws differ."""
    m = ucd.random_machine((2, 2, 2), gen(3), units="spin", gain=1.5, dtype=DT)
    x0 = [torch.tensor([[1.0, -1.0]], dtype=DT)] * 3
    n = 40_000
    start = [x.expand(n, -1).clone() for x in x0]
    out = ucd.gibbs_sweep(Target.joint(m), start, gen(4), random_order=random_order)
    counts = _cells(m, out)
    odd, even = _sweep_probabilities(m, x0, 1), _sweep_probabilities(m, x0, 0)
    expected = 0.5 * (odd + even) if random_order else odd
    other = odd if random_order else 0.5 * (odd + even)
    keep = expected > 0
    p = stats.chisquare(counts[keep], n * expected[keep]).pvalue
    assert p > 1e-3
    assert stats.chisquare(counts[keep], n * other[keep] / other[keep].sum()).pvalue < 1e-3


def test_diversity_measures_on_a_hand_made_set():
    a = [1, 1, 0, 0, 0, 0]
    b = [1, 1, 1, 1, 0, 0]  # 2 from a
    c = [0, 0, 0, 0, 1, 1]  # 4 from a, 6 from b
    x = torch.tensor([a, a, b, c], dtype=torch.float32)
    assert diversity.distinct(x) == 3
    # pairs: (a,a) 0, (a,b) 2, (a,c) 4, (a,b) 2, (a,c) 4, (b,c) 6 -> 18 / 6
    assert diversity.mean_pairwise_hamming(x) == pytest.approx(3.0)
    reference = torch.tensor([[1, 1, 1, 0, 0, 0], c, [1, 1, 1, 1, 1, 1]], dtype=torch.float32)
    torch.testing.assert_close(
        diversity.nearest_hamming(x, reference), torch.tensor([1.0, 1.0, 1.0, 0.0], dtype=DT)
    )
    # the reference in batches of one row: the same minima
    torch.testing.assert_close(
        diversity.nearest_hamming(x, reference, batch=1), diversity.nearest_hamming(x, reference)
    )
    assert diversity.distinct(x[:1]) == 1
    assert torch.isnan(torch.tensor(diversity.mean_pairwise_hamming(x[:1])))


def test_diversity_measures_reject_non_binary_rows():
    with pytest.raises(ValueError, match="0, 1"):
        diversity.distinct(torch.tensor([[0.5, 1.0]]))
    with pytest.raises(ValueError, match="2-d"):
        diversity.mean_pairwise_hamming(torch.zeros(4))

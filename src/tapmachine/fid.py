"""A Frechet distance for generated images without Inception weights (second paper, Tables 1-2).

The paper reports the Frechet Inception Distance (Heusel et al. 2017): the Frechet distance
||mu_1 - mu_2||^2 + tr(S_1 + S_2 - 2 (S_1 S_2)^{1/2}) between Gaussians fitted to Inception-v3
features of real and generated images. Inception weights cannot be downloaded here, so the
features are the penultimate layer of a small classifier trained on the same dataset
(``Classifier``, ``train_classifier``); the distance itself is torchmetrics'
``FrechetInceptionDistance`` with that network as its custom feature module. These numbers are a
"classifier FID": comparable between models scored with the same classifier, not with the paper's
Inception FID.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor, nn

__all__ = ["Classifier", "train_classifier", "accuracy", "frechet_distance"]


class Classifier(nn.Module):
    """An MLP n_in -> hidden -> features -> classes; ``features`` is the penultimate layer.

    As a torchmetrics feature module ``forward`` returns the penultimate features (``num_features``
    of them); ``logits`` gives the class scores.
    """

    def __init__(self, n_in: int, hidden: int = 256, features: int = 64, classes: int = 10):
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, features), nn.ReLU()
        )
        self.head = nn.Linear(features, classes)
        self.num_features = features
        self.config = {"n_in": n_in, "hidden": hidden, "features": features, "classes": classes}

    def forward(self, x: Tensor) -> Tensor:
        return self.body(x.reshape(x.shape[0], -1).float())

    def logits(self, x: Tensor) -> Tensor:
        return self.head(self(x))


@dataclasses.dataclass(frozen=True)
class ClassifierSettings:
    hidden: int = 256
    features: int = 64
    epochs: int = 3
    batch_size: int = 128
    learning_rate: float = 1e-3


def train_classifier(
    x: Tensor, y: Tensor, settings: ClassifierSettings, generator: torch.Generator
) -> Classifier:
    """Adam on cross-entropy, shuffled minibatches drawn with ``generator``."""
    x = torch.as_tensor(x, dtype=torch.float32)
    y = torch.as_tensor(y, dtype=torch.long)
    if x.ndim != 2 or y.shape != (x.shape[0],):
        raise ValueError(f"x {tuple(x.shape)} and y {tuple(y.shape)}: expected (n, d) and (n,)")
    classes = int(y.max()) + 1
    init_seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    with torch.random.fork_rng():
        torch.manual_seed(init_seed)
        net = Classifier(x.shape[1], settings.hidden, settings.features, classes)
    opt = torch.optim.Adam(net.parameters(), lr=settings.learning_rate)
    loss_fn = nn.CrossEntropyLoss()
    for _ in range(settings.epochs):
        order = torch.randperm(x.shape[0], generator=generator)
        for i in range(0, x.shape[0], settings.batch_size):
            idx = order[i : i + settings.batch_size]
            opt.zero_grad()
            loss = loss_fn(net.logits(x[idx]), y[idx])
            loss.backward()
            opt.step()
    net.eval()
    return net


@torch.no_grad()
def accuracy(net: Classifier, x: Tensor, y: Tensor) -> float:
    pred = net.logits(torch.as_tensor(x, dtype=torch.float32)).argmax(-1)
    return float((pred == torch.as_tensor(y)).double().mean())


@torch.no_grad()
def frechet_distance(net: nn.Module, real: Tensor, fake: Tensor, batch: int = 1000) -> float:
    """Frechet distance of the feature Gaussians of ``real`` and ``fake`` (torchmetrics FID)."""
    from torchmetrics.image.fid import FrechetInceptionDistance

    real = torch.as_tensor(real, dtype=torch.float32)
    fake = torch.as_tensor(fake, dtype=torch.float32)
    if real.shape[0] < 2 or fake.shape[0] < 2:
        raise ValueError("the Frechet distance needs at least two images per set")
    metric = FrechetInceptionDistance(feature=net, normalize=True)
    for i in range(0, real.shape[0], batch):
        metric.update(real[i : i + batch], real=True)
    for i in range(0, fake.shape[0], batch):
        metric.update(fake[i : i + batch], real=False)
    return float(metric.compute())

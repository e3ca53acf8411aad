"""A Frechet distance for generated images without Inception weights (second paper, Tables 1-2).

The paper reports the Frechet Inception Distance (Heusel et al. 2017): the Frechet distance
||mu_1 - mu_2||^2 + tr(S_1 + S_2 - 2 (S_1 S_2)^{1/2}) between Gaussians fitted to Inception-v3
features of real and generated images. Inception weights cannot be downloaded here, so the
features are the penultimate layer of a small CNN classifier trained on the same dataset
(``Classifier``, ``train_classifier``); the distance itself is torchmetrics'
``FrechetInceptionDistance`` with that network as its custom feature module. These numbers are a
"classifier FID": comparable between models scored with the same classifier, not with the paper's
Inception FID.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor, nn

__all__ = [
    "Classifier",
    "train_classifier",
    "random_shift",
    "accuracy",
    "frechet_distance",
    "save_classifier",
    "load_classifier",
]


def as_images(x: Tensor, shape) -> Tensor:
    """(n, H*W) rows -> (n, 1, H, W') grey images; the 8-bit layout of the data stage ((H, 8 W),
    8 bits per pixel, most significant first) is decoded to grey levels in [0, 1] (W' = W)."""
    h, w = shape
    x = x.reshape(x.shape[0], h, w).float()
    if w == 8 * h:
        bits = 2.0 ** torch.arange(7, -1, -1, dtype=x.dtype, device=x.device) / 255.0
        x = x.reshape(x.shape[0], h, h, 8) @ bits
    return x[:, None]


class Classifier(nn.Module):
    """A small CNN: (3x3 conv, [batch norm], ReLU, 2x2 max-pool) blocks, then ``features`` ReLU
    units (the penultimate layer, [dropout] before and after it) and the class scores.

    As a torchmetrics feature module ``forward`` returns the penultimate features (``num_features``
    of them) of rows of H*W pixels; ``logits`` gives the class scores. In ``eval`` mode batch norm
    uses its running statistics and dropout is off, so the features are deterministic.
    """

    def __init__(
        self,
        shape,
        channels=(32, 64),
        features: int = 128,
        classes: int = 10,
        batch_norm: bool = False,
        dropout: float = 0.0,
    ):
        super().__init__()
        h, w = (int(n) for n in shape)
        side = h if w == 8 * h else w  # the 8-bit layout is decoded to H x H
        layers, c_in = [], 1
        for c in channels:
            layers.append(nn.Conv2d(c_in, c, 3, padding=1, bias=not batch_norm))
            if batch_norm:
                layers.append(nn.BatchNorm2d(c))
            layers += [nn.ReLU(), nn.MaxPool2d(2)]
            c_in = c
        pooled = (h // 2 ** len(channels)) * (side // 2 ** len(channels))
        self.conv = nn.Sequential(*layers)
        self.drop = nn.Dropout(dropout)
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(c_in * pooled, features), nn.ReLU())
        self.head = nn.Linear(features, classes)
        self.shape = (h, w)
        self.num_features = features
        self.config = {
            "shape": [h, w],
            "channels": [int(c) for c in channels],
            "features": features,
            "classes": classes,
            "batch_norm": bool(batch_norm),
            "dropout": float(dropout),
        }

    def forward(self, x: Tensor) -> Tensor:
        return self.image_features(as_images(x, self.shape))

    def image_features(self, images: Tensor) -> Tensor:
        """Penultimate features of (n, 1, H, W) images."""
        return self.body(self.drop(self.conv(images)))

    def logits(self, x: Tensor) -> Tensor:
        return self.head(self.drop(self(x)))


def random_shift(images: Tensor, max_shift: int, generator: torch.Generator) -> Tensor:
    """Each (1, H, W) image moved by its own (dy, dx), uniform in [-max_shift, max_shift]^2, with
    zeros shifted in (the augmentation by translations of LeCun et al. 1998, Sec. III.C)."""
    if max_shift <= 0:
        return images
    n, _, h, w = images.shape
    s = max_shift
    padded = nn.functional.pad(images, (s, s, s, s))
    dy, dx = torch.randint(0, 2 * s + 1, (2, n, 1), generator=generator)
    rows = (dy + torch.arange(h))[:, :, None]
    cols = (dx + torch.arange(w))[:, None, :]
    return padded[torch.arange(n)[:, None, None], 0, rows, cols][:, None]


@dataclasses.dataclass(frozen=True)
class ClassifierSettings:
    channels: tuple = (32, 64)
    features: int = 128
    epochs: int = 3
    batch_size: int = 64
    learning_rate: float = 2e-3
    batch_norm: bool = False
    dropout: float = 0.0
    shift: int = 0


def train_classifier(
    x: Tensor, y: Tensor, shape, settings: ClassifierSettings, generator: torch.Generator
) -> Classifier:
    """Adam on cross-entropy, shuffled minibatches drawn with ``generator``; ``shape``: (H, W).

    The step decays from ``learning_rate`` to 0 along a half cosine over all steps (a few epochs
    then reach the accuracy that a constant step needs more epochs for). With ``shift`` > 0 every
    minibatch is moved by ``random_shift``.
    """
    x = torch.as_tensor(x, dtype=torch.float32)
    y = torch.as_tensor(y, dtype=torch.long)
    if x.ndim != 2 or y.shape != (x.shape[0],):
        raise ValueError(f"x {tuple(x.shape)} and y {tuple(y.shape)}: expected (n, d) and (n,)")
    classes = int(y.max()) + 1
    init_seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    with torch.random.fork_rng():
        torch.manual_seed(init_seed)
        net = Classifier(
            shape,
            settings.channels,
            settings.features,
            classes,
            settings.batch_norm,
            settings.dropout,
        )
    opt = torch.optim.Adam(net.parameters(), lr=settings.learning_rate)
    steps = settings.epochs * -(-x.shape[0] // settings.batch_size)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
    loss_fn = nn.CrossEntropyLoss()
    net.train()
    for _ in range(settings.epochs):
        order = torch.randperm(x.shape[0], generator=generator)
        for i in range(0, x.shape[0], settings.batch_size):
            idx = order[i : i + settings.batch_size]
            images = random_shift(as_images(x[idx], net.shape), settings.shift, generator)
            opt.zero_grad()
            loss = loss_fn(net.head(net.drop(net.image_features(images))), y[idx])
            loss.backward()
            opt.step()
            schedule.step()
    net.eval()
    return net


@torch.no_grad()
def accuracy(net: Classifier, x: Tensor, y: Tensor, batch: int = 1000) -> float:
    x = torch.as_tensor(x, dtype=torch.float32)
    pred = torch.cat([net.logits(x[i : i + batch]).argmax(-1) for i in range(0, x.shape[0], batch)])
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


def save_classifier(path, net: Classifier, test_accuracy: float, train_seconds: float) -> None:
    """Write a trained classifier (its weights, its constructor's settings, its test accuracy and
    training time) to ``path``, atomically."""
    from tapmachine.io.files import atomic_write

    blob = {
        "state": net.state_dict(),
        "config": net.config,
        "test_accuracy": test_accuracy,
        "train_seconds": train_seconds,
    }
    atomic_write(path, lambda fh: torch.save(blob, fh))


def load_classifier(path) -> tuple[Classifier, float]:
    """The classifier ``save_classifier`` wrote, in ``eval`` mode, and its test accuracy."""
    blob = torch.load(path, map_location="cpu", weights_only=True)
    net = Classifier(**blob["config"])
    net.load_state_dict(blob["state"])
    net.eval()
    return net, float(blob["test_accuracy"])

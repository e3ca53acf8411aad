"""How far the FID feature network's family gets on a binary dataset: test accuracy of
``tapmachine.ucd.fid.Classifier`` variants trained far longer than the workflow can afford.

    python benchmarks/classifier_ceiling.py [--data results/data/binary_fashion_mnist.npz]
        [--device cuda] [--epoch-scale 1.0]

One JSON line per variant (channels, features, epochs, batch norm, dropout, shift, weight decay,
test accuracy, wall seconds). The variants widen and deepen the network (two to three
convolution blocks, 128 to 512 features) and train it for 3 to 60 epochs with AdamW and a
one-cycle step, random shifts and dropout. If the longest of them stay below a goal, the goal is
out of this family's reach on that data, not out of the workflow's CPU budget. Made for a GPU
(minutes); ``--epoch-scale 0.01`` is a CPU smoke test.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from torch import nn

#: (channels, features, epochs, batch norm, dropout, max shift, weight decay)
VARIANTS = [
    ((32, 64), 128, 3, False, 0.0, 0, 0.0),
    ((64, 128), 256, 10, True, 0.3, 1, 0.0),
    ((64, 128), 256, 30, True, 0.3, 2, 5e-4),
    ((64, 128, 256), 256, 30, True, 0.3, 2, 5e-4),
    ((96, 192, 384), 512, 40, True, 0.4, 2, 5e-4),
    ((64, 128, 256), 256, 60, True, 0.3, 1, 5e-4),
]


def shifted(images, max_shift: int, generator: torch.Generator):
    """``fid.random_shift`` with its offsets drawn on the images' device."""
    if max_shift <= 0:
        return images
    n, _, h, w = images.shape
    dev = images.device
    padded = nn.functional.pad(images, (max_shift,) * 4)
    dy, dx = torch.randint(0, 2 * max_shift + 1, (2, n, 1), generator=generator, device=dev)
    rows = (dy + torch.arange(h, device=dev))[:, :, None]
    cols = (dx + torch.arange(w, device=dev))[:, None, :]
    return padded[torch.arange(n, device=dev)[:, None, None], 0, rows, cols][:, None]


def train_and_test(ds, variant, epochs: int, device, lr=2e-3, batch=128, seed=0) -> dict:
    from tapmachine.ucd import fid

    channels, features, _, batch_norm, dropout, shift, weight_decay = variant
    x = fid.as_images(torch.as_tensor(ds.x_train), ds.image_shape).to(device)
    y = torch.as_tensor(ds.y_train).long().to(device)
    torch.manual_seed(seed)
    net = fid.Classifier(ds.image_shape, channels, features, 10, batch_norm, dropout).to(device)
    opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=weight_decay)
    steps = epochs * -(-x.shape[0] // batch)
    schedule = torch.optim.lr_scheduler.OneCycleLR(opt, lr, total_steps=steps)
    g = torch.Generator(device=device).manual_seed(seed)
    t0 = time.perf_counter()
    net.train()
    for _ in range(epochs):
        order = torch.randperm(x.shape[0], generator=g, device=device)
        for i in range(0, x.shape[0], batch):
            idx = order[i : i + batch]
            features_ = net.image_features(shifted(x[idx], shift, g))
            loss = nn.functional.cross_entropy(net.head(net.drop(features_)), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            schedule.step()
    net.eval()
    accuracy = fid.accuracy(net.cpu(), ds.x_test, ds.y_test)
    return {
        "channels": list(channels),
        "features": features,
        "epochs": epochs,
        "batch_norm": batch_norm,
        "dropout": dropout,
        "shift": shift,
        "weight_decay": weight_decay,
        "test_accuracy": accuracy,
        "seconds": time.perf_counter() - t0,
        "device": str(device),
    }


def main(argv=None) -> None:
    from tapmachine.io import data

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default="results/data/binary_fashion_mnist.npz")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--epoch-scale", type=float, default=1.0)
    args = p.parse_args(argv)
    ds = data.load_dataset(args.data)
    for variant in VARIANTS:
        epochs = max(1, round(variant[2] * args.epoch_scale))
        result = train_and_test(ds, variant, epochs, torch.device(args.device))
        print(json.dumps({"data": ds.name, **result}), flush=True)


if __name__ == "__main__":
    main()

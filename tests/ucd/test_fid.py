"""Classifier FID: zero for a set against itself, growing with a shift; the classifier learns."""

from __future__ import annotations

import torch

from tapmachine.ucd import fid


def _blobs(n: int, g: torch.Generator):
    """Two classes of 20-pixel binary images: different on-probabilities per pixel."""
    y = torch.randint(0, 2, (n,), generator=g)
    p = torch.where(y[:, None] == 1, 0.8, 0.2) * torch.ones(n, 20)
    p[:, 10:] = 1 - p[:, 10:]
    return (torch.rand(n, 20, generator=g) < p).float(), y


def test_frechet_distance_zero_against_itself_and_growing_with_shift():
    g = torch.Generator().manual_seed(0)
    x, y = _blobs(2000, g)
    settings = fid.ClassifierSettings(channels=(8, 8), features=8, epochs=5, learning_rate=1e-2)
    net = fid.train_classifier(x, y, (4, 5), settings, g)
    assert fid.accuracy(net, *_blobs(500, g)) > 0.95
    real = x[:1000]
    assert abs(fid.frechet_distance(net, real, real)) < 1e-6
    distances = []
    for flip in (0.0, 0.1, 0.2, 0.4):
        noise = (torch.rand(1000, 20, generator=g) < flip).float()
        distances.append(fid.frechet_distance(net, real, (x[1000:] + noise) % 2))
    print("distances", distances)
    assert all(b > a for a, b in zip(distances, distances[1:], strict=False))
    assert distances[-1] > 10 * distances[0]


def test_eight_bit_layout_is_decoded_to_grey_levels():
    """(H, 8 H) rows of bits, most significant first, become H x H grey levels in [0, 1]."""
    h = 2
    grey = torch.tensor([[0, 255], [128, 1]])
    bits = ((grey[..., None] >> torch.arange(7, -1, -1)) & 1).reshape(1, h * 8 * h).float()
    images = fid.as_images(bits, (h, 8 * h))
    assert images.shape == (1, 1, h, h)
    torch.testing.assert_close(images[0, 0], grey.float() / 255.0)
    plain = fid.as_images(torch.arange(6.0)[None], (2, 3))
    torch.testing.assert_close(plain[0, 0], torch.arange(6.0).reshape(2, 3))


def test_random_shift_moves_each_image_by_its_own_offset_within_the_bound():
    """Every output is its input translated by some (dy, dx) in [-s, s]^2 with zeros shifted in,
    the offsets differ between images, and s = 0 leaves the images alone."""
    g = torch.Generator().manual_seed(0)
    images = torch.rand(200, 1, 6, 7, generator=g) + 0.5  # no zeros: a shift is recognisable
    s = 2
    out = fid.random_shift(images, s, g)
    padded = torch.nn.functional.pad(images, (s, s, s, s))
    offsets = set()
    for i in range(images.shape[0]):  # checking each image against all 25 candidate shifts
        hits = [
            (dy, dx)
            for dy in range(2 * s + 1)
            for dx in range(2 * s + 1)
            if torch.equal(out[i, 0], padded[i, 0, dy : dy + 6, dx : dx + 7])
        ]
        assert len(hits) == 1
        offsets.add(hits[0])
    assert len(offsets) == (2 * s + 1) ** 2  # 200 draws reach all 25 offsets
    assert fid.random_shift(images, 0, g) is images


def test_classifier_with_batch_norm_and_dropout_is_deterministic_in_eval_and_reloads():
    g = torch.Generator().manual_seed(1)
    x, y = _blobs(400, g)
    settings = fid.ClassifierSettings(
        channels=(4,), features=6, epochs=1, batch_norm=True, dropout=0.5, shift=1
    )
    net = fid.train_classifier(x, y, (4, 5), settings, g)
    assert net.config["batch_norm"] and net.config["dropout"] == 0.5
    torch.testing.assert_close(net(x[:50]), net(x[:50]), rtol=0, atol=0)
    again = fid.Classifier(**net.config)
    again.load_state_dict(net.state_dict())
    again.eval()
    torch.testing.assert_close(again(x[:50]), net(x[:50]), rtol=0, atol=0)

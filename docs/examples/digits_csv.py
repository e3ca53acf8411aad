"""Write scikit-learn's bundled handwritten digits (load_digits: 1,797 images of 8 x 8 pixels,
values 0-16) as binary rows to a CSV file: a pixel is 1 where its value exceeds 8, the label
is the column ``digit``. The own-data example of docs/own_data.md trains on it.

    python docs/examples/digits_csv.py data/digits.csv [--rows N]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
from sklearn.datasets import load_digits


def digits_table(rows: int | None = None) -> pd.DataFrame:
    """The first ``rows`` digits (all by default): columns p0..p63 in {0, 1}, then ``digit``."""
    digits = load_digits()
    table = pd.DataFrame((digits.data > 8).astype(int), columns=[f"p{i}" for i in range(64)])
    table["digit"] = digits.target
    return table.iloc[:rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--rows", type=int, default=None, help="the first N digits (default: all)")
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    digits_table(args.rows).to_csv(args.out, index=False)
    print(f"{args.out}: {len(digits_table(args.rows))} digits, 64 binary pixels each")


if __name__ == "__main__":
    main()

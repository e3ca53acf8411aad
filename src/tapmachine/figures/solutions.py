"""The harvested TAP solutions of Figs. 5-7, epoch by epoch and model by model: one column
(panel group) of a figure per model, as the paper draws binary MNIST, real MNIST and the faces
side by side."""

from __future__ import annotations

from tapmachine.figures.common import (
    PAPER_EPOCHS,
    PAPER_INITIALISATIONS,
    FigureError,
    FigureResult,
    ModelInfo,
    describe,
    table,
)

__all__ = [
    "PAPER_SIZES",
    "load_epochs",
    "load_columns",
    "column_title",
    "column_note",
    "per_model",
    "result",
]

#: The paper's harvest per dataset (Sec. VII.3, Fig. 5): training epochs and data
#: initialisations; every other dataset is measured against MNIST's.
PAPER_SIZES = {"real_faces": (500, 2400)}


def load_epochs(solution_files) -> tuple[list[dict], ModelInfo]:
    """The solutions files of one model, sorted by epoch, and its ModelInfo."""
    (column,) = load_columns(solution_files, one_model=True)
    return column


def load_columns(solution_files, one_model: bool = False) -> list[tuple[list[dict], ModelInfo]]:
    """The solutions files of one or more models, grouped by the model each file names: one
    (solutions sorted by epoch, ModelInfo) per model, in the order the models first appear in
    ``solution_files``. With ``one_model``, files of several models are an error."""
    from tapmachine.tap_paper.harvest import HarvestError, load_solutions

    if not solution_files:
        raise FigureError("no solutions files given")
    try:
        loaded = [load_solutions(f) for f in solution_files]
    except HarvestError as err:
        raise FigureError(str(err)) from None
    models = list(dict.fromkeys(s["model"] for s in loaded))
    if one_model and len(models) != 1:
        raise FigureError(f"solutions files come from several models: {sorted(models)}")
    columns = []
    for name in models:
        sols = sorted((s for s in loaded if s["model"] == name), key=lambda s: s["epoch"])
        epochs = [s["epoch"] for s in sols]
        if len(set(epochs)) != len(epochs):
            raise FigureError(f"solutions files of {name} repeat epochs: {epochs}")
        first = sols[0]
        info = ModelInfo(
            name=name,
            dataset=first["dataset"],
            substitute=first.get("substitute", ""),
            train_run_id=first.get("train_run_id", ""),
            harvest_run_ids={str(s["epoch"]): s.get("harvest_run_id", "") for s in sols},
            sizes=tuple(int(n) for n in first["layer_sizes"]),
        )
        columns.append((sols, info))
    return columns


def per_model(name: str, defaults: dict, overrides: dict | None) -> dict:
    """A column's settings: ``defaults`` with the keys ``overrides[name]`` gives replaced
    (config ``figures.<fig>.per_model``)."""
    return {**defaults, **((overrides or {}).get(name) or {})}


def column_note(info: ModelInfo, sols: list[dict]) -> str:
    """What a column's harvest lacks of the paper's (``PAPER_SIZES``: 100 epochs and 10,000
    initialisations, the faces 500 and 2,400), or "" at paper size."""
    epochs, inits = PAPER_SIZES.get(info.dataset, (PAPER_EPOCHS, PAPER_INITIALISATIONS))
    last, K = sols[-1]["epoch"], int(sols[0]["converged"].shape[0])
    short = []
    if last < epochs:
        short.append(f"{last} of {epochs} epochs")
    if K < inits:
        short.append(f"{K:,} of {inits:,} inits")
    return ", ".join(short)


def column_title(info: ModelInfo, sols: list[dict], index: int, n_columns: int) -> str:
    """A column's title, at most two lines: its letter (several columns), model and dataset,
    a substitute dataset named as such; then the harvest's shortfall (``column_note``)."""
    letter = f"({'abcdefghij'[index]}) " if n_columns > 1 else ""
    head = f"{letter}{describe(info)}"
    note = column_note(info, sols)
    return f"{head}\n{note}" if note else head


def result(fig, title: str, drawn, claims, columns, **params) -> FigureResult:
    """The FigureResult of a Fig. 5-7 drawn from ``columns`` ((solutions, ModelInfo) per model).

    The figure's title is ``title``, with "REDUCED SIZE" on a second line where a column's
    harvest is below the paper's (each column's title says by how much; a figure of one model
    names it, with its dataset (``describe``) and shortfall, in the title); the table holds the
    ``drawn`` rows (with the substitute's description on a substitute dataset's rows) and the
    ``claims``; the params name each model's harvested epochs, the substitute datasets, then
    ``params``.
    """
    if len(columns) == 1:
        ((sols, info),) = columns
        note = column_note(info, sols)
        title = f"{title}, {describe(info)}" + (f"\nREDUCED SIZE ({note})" if note else "")
    elif any(column_note(info, sols) for sols, info in columns):
        title += "\nREDUCED SIZE (per column: below its title)"
    fig.suptitle(title)
    infos = [info for _, info in columns]
    epochs = {info.name: [s["epoch"] for s in sols] for sols, info in columns}
    substitutes = {i.name: i.substitute for i in infos if i.substitute}
    extra = {"substitutes": substitutes} if substitutes else {}
    if substitutes:
        import pandas as pd

        drawn = pd.DataFrame(drawn)
        drawn["substitute"] = drawn["model"].map(substitutes).fillna("")
    return FigureResult(
        fig, table(drawn, claims), infos, params={"epochs": epochs, **extra, **params}
    )

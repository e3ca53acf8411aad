"""The harvested TAP solutions of one model, epoch by epoch, as Figs. 5-7 read them."""

from __future__ import annotations

from tapmachine.figures.common import (
    FigureError,
    FigureResult,
    ModelInfo,
    describe,
    size_note,
    table,
)

__all__ = ["load_epochs", "title_note", "result"]


def load_epochs(solution_files) -> tuple[list[dict], ModelInfo]:
    """The solutions files of one model, sorted by epoch, and its ModelInfo."""
    from tapmachine.tap_paper.harvest import HarvestError, load_solutions

    if not solution_files:
        raise FigureError("no solutions files given")
    try:
        sols = sorted((load_solutions(f) for f in solution_files), key=lambda s: s["epoch"])
    except HarvestError as err:
        raise FigureError(str(err)) from None
    models = {s["model"] for s in sols}
    if len(models) != 1:
        raise FigureError(f"solutions files come from several models: {sorted(models)}")
    epochs = [s["epoch"] for s in sols]
    if len(set(epochs)) != len(epochs):
        raise FigureError(f"solutions files repeat epochs: {epochs}")
    first = sols[0]
    info = ModelInfo(
        name=first["model"],
        dataset=first["dataset"],
        substitute=first.get("substitute", ""),
        train_run_id=first.get("train_run_id", ""),
        harvest_run_ids={str(s["epoch"]): s.get("harvest_run_id", "") for s in sols},
        sizes=tuple(int(n) for n in first["layer_sizes"]),
    )
    return sols, info


def title_note(last_epoch: int, initialisations: int) -> str:
    """Fig. 5-7 title line for runs below the paper's 100 epochs / 10,000 initialisations."""
    note = size_note(last_epoch, initialisations)
    return f"\n{note}" if note else ""


def result(fig, title: str, drawn, claims, info: ModelInfo, sols, **params) -> FigureResult:
    """The FigureResult of a Fig. 5-7 drawn from the solutions ``sols`` of the model ``info``.

    The figure's title is ``title``, the model and its dataset (``describe``), and the harvest's
    size note on a second line (``title_note``);
    the table holds the ``drawn`` rows (with the substitute's description, for substitute data)
    and the ``claims``; the params name the harvested epochs,
    then ``params``.
    """
    note = title_note(sols[-1]["epoch"], int(sols[0]["converged"].shape[0]))
    fig.suptitle(f"{title}, {describe(info)}{note}")
    epochs = [s["epoch"] for s in sols]
    if info.substitute:
        import pandas as pd

        drawn = pd.DataFrame(drawn).assign(substitute=info.substitute)
    return FigureResult(fig, table(drawn, claims), [info], params={"epochs": epochs, **params})

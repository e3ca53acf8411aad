"""Commands that read a run's figure CSVs back: ``tapmachine claims`` (the claim rows of a run as
markdown), ``tapmachine claims-spread`` (runs that differ in their seed, side by side),
``tapmachine claims-compare`` (a run before and after a change, row by row) and ``tapmachine
redraw-table`` (a table drawn again from its CSV alone)."""

from __future__ import annotations

from pathlib import Path


def claims_report(args) -> None:
    """``tapmachine claims``: the claim rows of a run's figure CSVs as one markdown report."""
    from tapmachine.figures import claims

    folder = Path(args.results)
    if (folder / "figures").is_dir():
        folder = folder / "figures"
    # resumed training jobs count all their epochs
    models, dbms = folder.parent / "models", folder.parent / "ucd" / "dbm"
    out = claims.write_report(
        folder,
        args.out,
        args.title,
        args.level,
        args.benchmarks,
        args.section,
        models if models.is_dir() else None,
        args.logs,
        args.rejudge,
        dbms if dbms.is_dir() else None,
    )
    print(f"wrote {out} (claim rows of {folder})")


def claims_spread(args) -> None:
    """``tapmachine claims-spread``: the claim rows of runs that differ only in their seed, side
    by side, with each verdict over the seeds (``figures.seed_spread``)."""
    from tapmachine.figures import seed_spread
    from tapmachine.io.files import atomic_write

    runs = {Path(folder).name: _figures_folder(folder) for folder in args.results}
    table = seed_spread.spread(runs)
    text = seed_spread.spread_markdown(table, args.title, args.level)
    atomic_write(args.out, lambda fh: fh.write(text), text=True)
    if args.csv:
        atomic_write(args.csv, lambda fh: table.to_csv(fh, index=False), text=True)
    print(f"wrote {args.out} (claim rows of {len(runs)} runs)")


def _figures_folder(path) -> Path:
    """A run's ``figures/`` given the run's results folder or the figures folder itself."""
    folder = Path(path)
    return folder / "figures" if (folder / "figures").is_dir() else folder


def claims_compare(args) -> None:
    """``tapmachine claims-compare``: the claim rows of a run before and after a change, row by
    row, with how each verdict moved (``figures.claims_compare``)."""
    from tapmachine.figures import claims_compare
    from tapmachine.io.files import atomic_write

    before, after = _figures_folder(args.before), _figures_folder(args.after)
    table = claims_compare.compare(before, after, rejudge=args.rejudge)
    names = (args.before_name or before.parent.name, args.after_name or after.parent.name)
    text = claims_compare.compare_markdown(table, args.title, args.level, names)
    atomic_write(args.out, lambda fh: fh.write(text), text=True)
    if args.csv:
        atomic_write(args.csv, lambda fh: table.to_csv(fh, index=False), text=True)
    print(f"wrote {args.out} (claim rows of {before} and {after})")


def redraw_table(args) -> None:
    """``tapmachine redraw-table``: a table, Fig. 3 or Fig. 12 drawn again by the current code
    from its CSV alone (``figures.redraw``), written as PNG and CSV (and PDF with ``--pdf``) under
    ``--out``, named as the CSV; refused, nothing written, when a claim row's value or (without
    ``--rejudge``) verdict differs from the CSV's."""
    from tapmachine.figures import common, redraw
    from tapmachine.figures.common import FigureError

    table = redraw.read_table(args.csv)
    name = args.table or redraw.table_name(args.csv)
    result = redraw.redraw(table, name)
    changed, only = redraw.claim_differences(table, result.table, verdicts=not args.rejudge)
    if changed:
        raise FigureError(
            f"{args.csv}: the redrawn claim rows differ from the CSV's, nothing written: "
            + "; ".join(changed)
        )
    if args.rejudge:
        only = redraw.verdict_changes(table, result.table) + only
    out, stem = Path(args.out), Path(args.csv).stem
    pdf = out / f"{stem}.pdf" if args.pdf else None
    paths = common.save(result, out / f"{stem}.png", pdf, out / f"{stem}.csv")
    for line in only:
        print(line)
    judged = "verdicts of the current code" if args.rejudge else f"claim rows as in {args.csv}"
    print(f"wrote {', '.join(str(p) for p in paths)} ({name}, {judged})")


def register(subparsers) -> None:
    r = subparsers.add_parser(
        "redraw-table",
        help="draw a table (ucd_table1, ucd_table2, likelihood_table), Fig. 3 or Fig. 12 again "
        "from its CSV",
    )
    r.add_argument("--csv", required=True, help="the table's CSV (a figure table)")
    r.add_argument("--out", required=True, help="folder to write <csv name>.png and .csv to")
    r.add_argument(
        "--table",
        default=None,
        choices=["ucd_table1", "ucd_table2", "likelihood_table", "fig3", "fig12"],
        help="which table the CSV holds (default: the CSV's file name)",
    )
    r.add_argument("--pdf", action="store_true", help="also write <csv name>.pdf")
    r.add_argument(
        "--rejudge",
        action="store_true",
        help="write the current code's verdicts where they differ from the CSV's (a committed "
        "run judged again; each such row is printed); values must still agree",
    )
    r.set_defaults(func=redraw_table)
    spread = subparsers.add_parser(
        "claims-spread",
        help="the claim rows of runs that differ in their seed, side by side (verdict per seed)",
    )
    spread.add_argument(
        "--results", nargs="+", required=True, help="results folders of the runs (results/<run>)"
    )
    spread.add_argument("--out", required=True, help="markdown file to write")
    spread.add_argument("--csv", default=None, help="also write the table as CSV")
    spread.add_argument("--title", default=None, help="heading of the report")
    spread.add_argument("--level", type=int, default=2, help="heading level of the title")
    spread.set_defaults(func=claims_spread)
    compare = subparsers.add_parser(
        "claims-compare",
        help="the claim rows of a run before and after a change, row by row (how each verdict "
        "moved)",
    )
    compare.add_argument("--before", required=True, help="results folder (or figures/) before")
    compare.add_argument("--after", required=True, help="results folder (or figures/) after")
    compare.add_argument("--out", required=True, help="markdown file to write")
    compare.add_argument("--csv", default=None, help="also write the table as CSV")
    compare.add_argument("--before-name", default=None, help="column header of the first run")
    compare.add_argument("--after-name", default=None, help="column header of the second run")
    compare.add_argument(
        "--rejudge",
        action="store_true",
        help="judge both runs' fig3, fig4, fig5 and tables again by the current code (a committed "
        "run whose inputs are gone, e.g. docs/results/paper)",
    )
    compare.add_argument("--title", default=None, help="heading of the report")
    compare.add_argument("--level", type=int, default=2, help="heading level of the title")
    compare.set_defaults(func=claims_compare)
    c = subparsers.add_parser(
        "claims", help="every figure's claim rows of a run (held / not held) as markdown"
    )
    c.add_argument(
        "--results", required=True, help="a run's results folder (results/<run>) or its figures/"
    )
    c.add_argument("--out", required=True, help="markdown file to write")
    c.add_argument("--title", default=None, help="heading of the report")
    c.add_argument("--level", type=int, default=2, help="heading level of the title")
    c.add_argument(
        "--benchmarks", default=None, help="the run's benchmarks/ folder: add job wall times"
    )
    c.add_argument(
        "--logs",
        default=None,
        help="the run's logs/ folder: a resumed training job's log names the epoch its last "
        "start resumed from, a resumed scoring job's the epochs it kept, so their wall times "
        "count their earlier starts exactly",
    )
    c.add_argument(
        "--section",
        default=None,
        help="replace only the part between <!-- claims:SECTION --> and <!-- /claims:SECTION -->"
        " of --out (e.g. docs/results.md)",
    )
    c.add_argument(
        "--rejudge",
        action="store_true",
        help="compute the claim rows of fig3, fig4, fig5, fig12 and the tables (ucd_table1, "
        "ucd_table2, likelihood_table) again from their CSVs' drawn rows (the current verdicts "
        "of a run whose inputs are gone, e.g. docs/results/paper; a Fig. 12 CSV without the "
        "columns its redraw reads keeps its rows)",
    )
    c.set_defaults(func=claims_report)

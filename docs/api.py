"""Write docs/api.md, the API page of the package's public names (``tapmachine.__all__``), from
their numpydoc docstrings and signatures. tests/test_api_page.py fails when the page differs from
what this writes.

    python docs/api.py
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

PAGE = Path(__file__).with_name("api.md")

#: The estimators' own methods, in the page's order; their other public methods are
#: scikit-learn's (``BaseEstimator``, ``TransformerMixin``), listed by name.
METHODS = ("fit", "partial_fit", "transform", "score_samples", "score", "sample")

INTRO = """\
# API

The public names of the package, `from tapmachine import ...` (`tapmachine.__all__`). This page
is written from their docstrings by `python docs/api.py`; `tests/test_api_page.py` fails when
the two differ, checks that every parameter of a signature is documented with its default, and
runs the examples. The estimators' defaults are the config schema's
(`src/tapmachine/io/config.schema.yaml`), so the signatures below show the schema's values.
How the estimators relate to the workflow:
[layout.md](layout.md#the-package-layers-imports-pointing-down).
"""

UNDERLINE = re.compile(r"^-{3,}$")
ENTRY = re.compile(r"^(?P<names>[*\w][\w, *]*?)(?: : (?P<type>.+))?$")


def sections(doc: str) -> list[tuple[str, list[str]]]:
    """A numpydoc docstring as (title, lines) pairs, the untitled summary first."""
    lines = inspect.cleandoc(doc).splitlines()
    out: list[tuple[str, list[str]]] = [("", [])]
    for i, line in enumerate(lines):
        if UNDERLINE.match(line):
            continue
        if i + 1 < len(lines) and UNDERLINE.match(lines[i + 1]) and line.strip():
            out.append((line.strip(), []))
        else:
            out[-1][1].append(line)
    return [(title, _trimmed(body)) for title, body in out]


def _trimmed(lines: list[str]) -> list[str]:
    while lines and not lines[0].strip():
        lines = lines[1:]
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    return lines


def entries(lines: list[str]) -> list[tuple[list[str], str, str]]:
    """The entries of a Parameters, Attributes or Returns section: (names, type, description),
    an entry being ``name[, name] : type`` at the section's indent and its indented lines."""
    out: list[tuple[list[str], str, list[str]]] = []
    for line in lines:
        if line and not line[0].isspace():
            match = ENTRY.match(line)
            if match is None:
                raise ValueError(f"not a numpydoc entry: {line!r}")
            names = [n.strip() for n in match["names"].split(",")]
            out.append((names, match["type"] or "", []))
        elif out:
            out[-1][2].append(line.strip())
        elif line.strip():
            raise ValueError(f"text before the first entry: {line!r}")
    return [(names, kind, " ".join(d for d in desc if d)) for names, kind, desc in out]


def markdown(text: str) -> str:
    """reStructuredText's inline literals as markdown's."""
    return text.replace("``", "`")


def _entries_md(lines: list[str]) -> list[str]:
    out = []
    for names, kind, desc in entries(lines):
        head = ", ".join(f"`{n}`" for n in names) + (f" : {markdown(kind)}" if kind else "")
        out.append(f"- {head}" + (f"<br>\n  {markdown(desc)}" if desc else ""))
    return out


def _prose_md(lines: list[str]) -> list[str]:
    return [markdown(line) for line in lines]


def _section_md(title: str, lines: list[str], label: str) -> list[str]:
    if title in ("Parameters", "Attributes", "Returns"):
        body = _entries_md(lines)
    elif title == "Examples":
        body = ["```pycon", *lines, "```"]
    else:
        body = _prose_md(lines)
    return [label, "", *body, ""]


def _param(p: inspect.Parameter) -> str:
    return str(p.replace(annotation=inspect.Parameter.empty))


def signature_md(name: str, obj) -> list[str]:
    """The call's signature, one parameter a line, in a code block."""
    params = list(inspect.signature(obj).parameters.values())
    shown: list[str] = []
    for i, p in enumerate(params):
        if p.kind is p.KEYWORD_ONLY and (i == 0 or params[i - 1].kind is not p.KEYWORD_ONLY):
            shown.append("*")
        shown.append(_param(p))
    return ["```python", f"{name}(", *(f"    {s}," for s in shown), ")", "```", ""]


def class_md(name: str, cls) -> list[str]:
    out = [f"## `tapmachine.{name}`", "", *signature_md(name, cls)]
    for title, lines in sections(cls.__doc__):
        if title:
            out += _section_md(title, lines, f"### {title}")
        else:
            out += [*_prose_md(lines), ""]
    out += ["### Methods", ""]
    for method in METHODS:
        func = getattr(cls, method)
        params = [p for p in inspect.signature(func).parameters.values() if p.name != "self"]
        out += [f"#### `{method}({', '.join(_param(p) for p in params)})`", ""]
        for title, lines in sections(func.__doc__):
            if title:
                out += _section_md(title, lines, f"**{title}**")
            else:
                out += [*_prose_md(lines), ""]
    others = sorted(n for n in public_methods(cls) if n not in METHODS)
    out += [
        "scikit-learn's, inherited: " + ", ".join(f"`{n}`" for n in others) + ".",
        "",
    ]
    return out


def public_methods(cls) -> list[str]:
    """The public methods of ``cls``; ValueError for one of the package's that the page does
    not document."""
    names = [n for n in dir(cls) if not n.startswith("_") and inspect.isfunction(getattr(cls, n))]
    for n in names:
        module = getattr(cls, n).__module__
        if n not in METHODS and not module.startswith("sklearn."):
            raise ValueError(f"{cls.__name__}.{n} ({module}) is public and not on the page")
    return names


def render() -> str:
    import tapmachine

    out = [INTRO]
    for name in tapmachine.__all__:
        obj = getattr(tapmachine, name)
        if inspect.isclass(obj):
            out += class_md(name, obj)
        elif name == "__version__":
            out += [
                "## `tapmachine.__version__`",
                "",
                f'`"{obj}"`: the package\'s version, which the built distribution takes as its '
                "own (pyproject.toml reads it).",
                "",
            ]
        else:
            raise ValueError(f"tapmachine.{name}: no rendering for a {type(obj).__name__}")
    return "\n".join(out).rstrip("\n") + "\n"


if __name__ == "__main__":
    PAGE.write_text(render())
    print(f"wrote {PAGE}")

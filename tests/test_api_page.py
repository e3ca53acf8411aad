"""docs/api.md is the public names' docstrings as docs/api.py renders them, those docstrings are
numpydoc with every parameter documented at its real default, and their examples run."""

import ast
import doctest
import importlib.util
import inspect
from pathlib import Path

import pytest

import tapmachine

ROOT = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("api_page", ROOT / "docs" / "api.py")
api = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(api)

CLASSES = [n for n in tapmachine.__all__ if inspect.isclass(getattr(tapmachine, n))]


def test_the_page_is_the_docstrings_rendered():
    assert api.PAGE.read_text() == api.render(), "docs/api.md is out of date: python docs/api.py"


def test_every_public_name_is_on_the_page():
    page = api.PAGE.read_text()
    assert set(CLASSES) == {"TAPMachine", "UCDDBM"}
    for name in tapmachine.__all__:
        assert f"## `tapmachine.{name}`" in page, name


def documented(doc: str, title: str) -> list[tuple[str, str, str]]:
    """(name, type, description) of each name the section ``title`` documents."""
    found = dict(api.sections(doc))
    assert title in found, f"no {title} section"
    return [(n, kind, desc) for names, kind, desc in api.entries(found[title]) for n in names]


def default_of(kind: str):
    """The value after ``default=`` in a numpydoc type, as a Python literal."""
    assert "default=" in kind, kind
    return ast.literal_eval(kind.split("default=", 1)[1])


def check_parameters(func, doc: str, skip=("self",)) -> None:
    """Every parameter of ``func``'s signature documented in order, with a type and a
    description, and the documented default the signature's (a parameter typed None, scikit-learn's
    ignored ``y``, has only that one)."""
    params = [p for p in inspect.signature(func).parameters.values() if p.name not in skip]
    entries = documented(doc, "Parameters")
    assert [e[0] for e in entries] == [p.name for p in params]
    for (name, kind, desc), p in zip(entries, params, strict=True):
        assert kind and desc, name
        if p.default is not p.empty and kind != "None":  # ``y : None``: scikit-learn's "Ignored"
            assert default_of(kind) == p.default, name


@pytest.mark.parametrize("name", CLASSES)
def test_the_estimators_are_documented_in_numpydoc(name):
    cls = getattr(tapmachine, name)
    check_parameters(cls, cls.__doc__)
    for attribute, kind, desc in documented(cls.__doc__, "Attributes"):
        assert attribute.endswith("_") and kind and desc, attribute
    assert dict(api.sections(cls.__doc__))["Examples"]
    for method in api.METHODS:
        func = getattr(cls, method)
        check_parameters(func, func.__doc__)
        assert all(kind and desc for _, kind, desc in documented(func.__doc__, "Returns")), method


def test_a_wrong_documented_default_is_caught():
    """The check above can fail: a docstring whose default is not the signature's."""

    def f(a=1):
        pass

    doc = "Summary.\n\nParameters\n----------\na : int, default=2\n    What a is.\n"
    with pytest.raises(AssertionError, match="a"):
        check_parameters(f, doc)


@pytest.mark.parametrize("name", CLASSES)
def test_the_examples_run(name):
    """Each estimator's Examples section, as doctest runs it (tiny data, two epochs)."""
    cls = getattr(tapmachine, name)
    (test,) = doctest.DocTestFinder(recurse=False).find(cls, name)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    result = runner.run(test)
    assert result.attempted >= 4 and result.failed == 0

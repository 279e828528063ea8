"""The package maps stay true: each package's ``__init__`` names every module and subpackage it holds, and
CONTRIBUTING.md's layout names every package, so that a reader's map of the code is the code."""

from __future__ import annotations

from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "torchferry"
CONTRIBUTING = PACKAGE.parent / "CONTRIBUTING.md"
PACKAGES = sorted(p.parent for p in PACKAGE.rglob("__init__.py"))


def members(package: Path) -> list[str]:
    """The modules and subpackages of ``package`` (files and folders with code)."""
    modules = [p.stem for p in package.glob("*.py") if p.stem != "__init__"]
    return modules + [p.name for p in package.iterdir() if (p / "__init__.py").is_file() or p.name == "csrc"]


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_a_packages_init_names_every_module_it_holds(package):
    text = (package / "__init__.py").read_text()
    missing = [m for m in members(package) if m not in text]
    assert missing == [], f"{package.relative_to(PACKAGE.parent)}/__init__.py does not name {missing}"


def test_contributing_names_every_package():
    text = CONTRIBUTING.read_text()
    missing = [str(p.relative_to(PACKAGE.parent)) for p in PACKAGES
               if f"`{p.relative_to(PACKAGE.parent)}/`" not in text and f"`{p.relative_to(PACKAGE.parent)}`" not in text]
    assert missing == [], f"CONTRIBUTING.md's layout does not name {missing}"

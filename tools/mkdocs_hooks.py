"""MkDocs hooks (``hooks:`` in mkdocs.yml): the site's home page is README.md (its ``docs/`` links
made relative to the site), and the reference pages are generated from the code at build time
(``tools/gen_reference.py``), so the site never shows a stale reference. A committed reference
page that differs from what the code generates is a warning, which ``mkdocs build --strict``
turns into a failed build."""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `import tools...` when mkdocs runs from another folder
    sys.path.insert(0, str(ROOT))

from tools import gen_reference  # noqa: E402

log = logging.getLogger("mkdocs.hooks.servesim")
SOURCE_MIRROR = ROOT / "build" / "docs-src"  # mkdocs.yml: mkdocstrings' python paths


def mirror_package(dest: Path = SOURCE_MIRROR) -> Path:
    """The ``servesim`` package as it installs (sim/ with policies/, plots/ and scenarios/ as its
    subpackages: pyproject's package-dir), laid out with links under ``dest``, so that
    mkdocstrings reads the docstrings by static analysis from the working tree, whatever the
    installation (an editable install maps folders that static analysis cannot follow)."""
    pkg = dest / "servesim"
    subpackages = {"policies": ROOT / "policies", "plots": ROOT / "plots", "scenarios": ROOT / "scenarios"}
    pkg.mkdir(parents=True, exist_ok=True)
    wanted = {p.name: p for p in (ROOT / "sim").iterdir() if p.name != "__pycache__"} | subpackages
    for link in pkg.iterdir():
        if link.name not in wanted or not link.is_symlink() or link.resolve() != wanted[link.name].resolve():
            link.unlink() if link.is_symlink() or link.is_file() else None
    for name, target in wanted.items():
        if not (pkg / name).exists():
            (pkg / name).symlink_to(target)
    return dest


mirror_package()  # before mkdocstrings loads anything
_generated: dict[str, str] = {}


def readme_as_index(text: str) -> str:
    """README.md as the site's index.md: links into docs/ become links within the site."""
    return re.sub(r"\]\(docs/", "](", text)


def on_files(files, config):
    _generated.clear()
    _generated.update({f"reference/{name}": text for name, text in gen_reference.generated().items()})
    for uri, text in _generated.items():
        committed = Path(config["docs_dir"]) / uri
        if not committed.is_file() or committed.read_text() != text:
            log.warning(f"docs/{uri} is out of date with the code: run python tools/gen_reference.py")
        old = files.get_file_from_path(uri)
        if old is not None:
            files.remove(old)
        files.append(File.generated(config, uri, content=text))
    if files.get_file_from_path("index.md") is None:
        files.append(File.generated(config, "index.md", content=readme_as_index((ROOT / "README.md").read_text())))
    return files

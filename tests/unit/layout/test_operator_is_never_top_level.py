"""The repository's operator/ folder never shadows the standard library's ``operator`` module.

`python -m ...` from the repository root puts the root first on sys.path; a regular package named
``operator`` there would replace the stdlib module that collections, enum and asyncio import. The
folder is therefore a namespace portion (no __init__.py), which the import system ranks below
any regular module, and it is importable only as ``kubegang.operator``.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def _fresh_import(code: str) -> str:
    probe = f"import sys; sys.path.insert(0, {str(REPO)!r}); sys.modules.pop('operator', None); {code}"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                          cwd=REPO).stdout.strip()


def test_import_operator_is_the_standard_library_even_with_the_repo_first_on_sys_path() -> None:
    path = Path(_fresh_import("import operator; print(operator.__file__)"))
    assert path.parent == Path(sysconfig.get_paths()["stdlib"])


def test_the_operator_package_is_importable_as_kubegang_operator() -> None:
    assert _fresh_import("import kubegang.operator._job as j; print(j.__name__)") == "kubegang.operator._job"


def test_no_init_file_makes_the_folder_a_regular_top_level_package() -> None:
    assert not (REPO / "operator" / "__init__.py").exists()

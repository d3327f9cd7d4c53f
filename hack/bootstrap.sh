#!/usr/bin/env bash
# Creates .venv and installs kubegang with its dev dependencies; re-installs only when
# pyproject.toml changed since the last install (a stamp file records its hash).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"
PYTHON="${PYTHON:-python3}"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || die "Python >= 3.11 is required ($PYTHON is $("$PYTHON" --version))"
stamp=.venv/.kubegang-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [[ -f $stamp && $(cat "$stamp") == "$want" ]]; then exit 0; fi
log "creating .venv and installing kubegang[dev] from PyPI"
# `python -m` puts the working directory first on sys.path, where operator/ would shadow the
# standard library's operator module before the venv has anything installed: run from /.
[[ -x .venv/bin/python ]] || ( cd / && "$PYTHON" -m venv "$REPO_ROOT/.venv" )
( cd / && "$REPO_ROOT/.venv/bin/python" -m pip install -q --upgrade pip )
( cd / && "$REPO_ROOT/.venv/bin/python" -m pip install -q -e "$REPO_ROOT[dev]" )
echo "$want" > "$stamp"

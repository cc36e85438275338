# Sourced by scripts/test and scripts/demo: create or refresh .venv when needed.
# Refresh when pyproject.toml is newer than the stamp left by the last install.
ensure_venv() {
  local py="${PYTHON:-python3}"
  if [ ! -x .venv/bin/python ]; then
    echo "== creating .venv" >&2
    "$py" -m venv .venv
  fi
  if [ ! -f .venv/.installed ] || [ pyproject.toml -nt .venv/.installed ]; then
    local extras="${MINIKAFKA_EXTRAS:-dev}"   # .ci/run adds 'peers'
    echo "== installing minikafka and its [$extras] dependencies into .venv" >&2
    .venv/bin/python -m pip install -q --upgrade pip >&2
    .venv/bin/python -m pip install -q -e ".[$extras]" >&2
    touch .venv/.installed
  fi
}

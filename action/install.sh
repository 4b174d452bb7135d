#!/usr/bin/env bash
# The GitHub Action's install step (action.yml): kvcheck in its own virtual environment, so a runner
# whose system Python is "externally managed" (PEP 668) works too. Environment:
#   KVCHECK_PACKAGE  what pip installs (default: this action's own checkout, so the action's ref pins kvcheck)
#   KVCHECK_EXTRAS   extras of that checkout (gpu, sglang), comma-separated
#   ACTION_PATH      the action's folder; RUNNER_TEMP  where the environment goes
#   GITHUB_OUTPUT    receives kvcheck=<executable> and python=<interpreter>
set -euo pipefail
python=${KVCHECK_INSTALL_PYTHON:-python3}
venv="${RUNNER_TEMP:-/tmp}/kvcheck-venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
package=${KVCHECK_PACKAGE:-$ACTION_PATH}
if [ -z "${KVCHECK_PACKAGE:-}" ] && [ -n "${KVCHECK_EXTRAS:-}" ]; then package="$package[$KVCHECK_EXTRAS]"; fi
# shellcheck disable=SC2086  # KVCHECK_PIP_ARGS is a word list on purpose
"$venv/bin/python" -m pip install --quiet ${KVCHECK_PIP_ARGS:-} "$package"
"$venv/bin/kvcheck" --version
{
  echo "kvcheck=$venv/bin/kvcheck"
  echo "python=$venv/bin/python"
} >> "${GITHUB_OUTPUT:-/dev/null}"

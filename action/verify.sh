#!/usr/bin/env bash
# The GitHub Action's check step (action.yml): `kvcheck verify` on every manifest and deployment,
# annotations on the lines that cause findings, the Markdown report in the job summary whatever the
# verdict, SARIF for code scanning when asked, and kvcheck's exit code as the step's.
#
# Environment (the action's inputs; tests/report/test_action.py runs this script for real):
#   KVCHECK_MANIFESTS    manifests, whitespace-separated, globs allowed: each is checked on its own
#   KVCHECK_DEPLOYMENTS  one deployment per line: its files (whitespace-separated, globs allowed) together
#   KVCHECK_MODE         estimate (default) or measure
#   KVCHECK_ARGS         more verify options for every check, whitespace-separated (e.g. --strict)
#   KVCHECK_DEPLOYMENT_ARGS  more verify options for the deployments only (e.g. --gpu H200): a manifest
#                        states the GPU, window, config and release itself and refuses them (exit 2)
#   KVCHECK_SARIF        write SARIF here (empty: none)
#   KVCHECK_SUMMARY      "true": append the Markdown report to $GITHUB_STEP_SUMMARY
#   KVCHECK, KVCHECK_PYTHON  the kvcheck command and a Python for merging SARIF (default: kvcheck, python3)
#   GITHUB_STEP_SUMMARY, GITHUB_OUTPUT  set by the runner; outputs: exit-code, sarif
# Exit code: 0 when every check passes; otherwise the most pressing of the checks' codes, in the
# order 4 (kvcheck bug), 2 (invalid input), 1 (a finding blocks), 3 (could not check).
set -uo pipefail
shopt -s nullglob

read -ra kvcheck <<< "${KVCHECK:-kvcheck}"
read -ra extra <<< "${KVCHECK_ARGS:-}"
read -ra deployment_extra <<< "${KVCHECK_DEPLOYMENT_ARGS:-}"
mode=${KVCHECK_MODE:-estimate}
summary=${GITHUB_STEP_SUMMARY:-/dev/null}
[ "${KVCHECK_SUMMARY:-true}" = "true" ] || summary=/dev/null
work=$(mktemp -d "${RUNNER_TEMP:-/tmp}/kvcheck-action.XXXXXX")
worst=0
runs=0

rank() {  # how pressing an exit code is (see the header)
  case $1 in 0) echo 0 ;; 3) echo 1 ;; 1) echo 2 ;; 2) echo 3 ;; *) echo 4 ;; esac
}

words() {  # the whitespace-separated words of $1, one a line, as written: no glob is expanded here
  local list
  read -rd "" -a list <<< "$1"
  [ ${#list[@]} -eq 0 ] || printf '%s\n' "${list[@]}"
}

expand() {  # the words of $1 with globs expanded (a pattern that matches nothing is refused beforehand)
  local word matches
  while IFS= read -r word; do
    matches=($word)
    printf '%s\n' "${matches[@]}"
  done < <(words "$1")
}

unmatched=0
refuse_unmatched() {  # a pattern (or a file) that names nothing is an error, never fewer checks
  local word matches
  while IFS= read -r word; do
    matches=($word)
    if [ ${#matches[@]} -eq 0 ]; then
      echo "::error title=kvcheck::input '$word' matches no file"
      { echo "## kvcheck: input \`$word\` matches no file"; echo; } >> "$summary"
      unmatched=$((unmatched + 1))
    fi
  done < <(words "$1")
}

check() {  # one `kvcheck verify` over the files given: check manifest|deployment FILE...
  runs=$((runs + 1))
  local n=$runs args code kind=$1
  shift
  args=(verify "$@" --mode "$mode" "${extra[@]}")
  [ "$kind" = deployment ] && args+=("${deployment_extra[@]}")
  args+=(--format github --report "markdown=$work/$n.md")
  [ -n "${KVCHECK_SARIF:-}" ] && args+=(--report "sarif=$work/$n.sarif")
  echo "::group::kvcheck verify $* (mode $mode)"
  "${kvcheck[@]}" "${args[@]}" 2> >(tee "$work/$n.err" >&2)
  code=$?
  wait $! 2>/dev/null || true  # let tee finish writing the captured stderr
  echo "::endgroup::"
  if [ -s "$work/$n.md" ]; then
    cat "$work/$n.md" >> "$summary"
  else  # no report: invalid input or kvcheck could not start; say why in the summary
    {
      echo "## kvcheck verify: no report (exit $code)"
      echo
      echo "files: \`$*\`"
      echo
      echo '```'
      tail -n 20 "$work/$n.err"
      echo '```'
    } >> "$summary"
  fi
  echo >> "$summary"
  if [ "$(rank "$code")" -gt "$(rank "$worst")" ]; then worst=$code; fi
}

refuse_unmatched "${KVCHECK_MANIFESTS:-}"
while IFS= read -r line; do refuse_unmatched "$line"; done <<< "${KVCHECK_DEPLOYMENTS:-}"
[ "$unmatched" -eq 0 ] || worst=2

while IFS= read -r file; do
  [ -n "$file" ] && check manifest "$file"
done < <(expand "${KVCHECK_MANIFESTS:-}")

while IFS= read -r line; do
  mapfile -t files < <(expand "$line")
  [ ${#files[@]} -gt 0 ] && check deployment "${files[@]}"
done <<< "${KVCHECK_DEPLOYMENTS:-}"

if [ "$runs" -eq 0 ] && [ "$unmatched" -eq 0 ]; then
  echo "::error title=kvcheck::no manifest or deployment file given (inputs manifests and deployments are empty)"
  worst=2
fi

if [ -n "${KVCHECK_SARIF:-}" ]; then
  "${KVCHECK_PYTHON:-python3}" "$(dirname "$0")/merge_sarif.py" "$KVCHECK_SARIF" "$work"/*.sarif || worst=4
  echo "sarif=$KVCHECK_SARIF" >> "${GITHUB_OUTPUT:-/dev/null}"
fi
echo "exit-code=$worst" >> "${GITHUB_OUTPUT:-/dev/null}"
rm -rf "$work"
exit "$worst"

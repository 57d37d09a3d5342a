# Shared by the deployment tests (tests/deploy/*.sh): skipping with the reason, checks that
# fail with what was expected, and waiting for a condition with a bound.

# A skip shows in ctest (SKIP_RETURN_CODE 77) and in scripts/skipped-tests.py's list, which reads
# GoogleTest's format.
skip() {
  echo "${BASH_SOURCE[1]}:${BASH_LINENO[0]}: Skipped"
  echo "$*"
  echo "[  SKIPPED ] deploy.$(basename "$0" .sh)"
  exit 77
}

fail() {
  echo "FAILED: $*" >&2
  exit 1
}

# expect_file PATH: a regular file or a link to one.
expect_file() { [ -f "$1" ] || fail "expected file $1"; }

# expect_contains TEXT NEEDLE WHAT
expect_contains() {
  case "$1" in *"$2"*) ;; *) fail "$3: expected '$2' in: $1" ;; esac
}

# wait_for SECONDS DESCRIPTION COMMAND...: runs COMMAND every second until it succeeds.
wait_for() {
  local limit=$1 what=$2
  shift 2
  local i
  for ((i = 0; i < limit; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 1
  done
  fail "$what (waited ${limit} s)"
}

# summary_status RUN_DIR: the job's final status from its summary.json ("" while running).
summary_status() {
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["status"])' "$1/summary.json" \
    2>/dev/null || true
}


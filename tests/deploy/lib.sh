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

# generation_members RUN_DIR NODE: succeeds when the job's latest generation has a trainer on
# NODE (trainer names end in "<node>-t<n>"); `generation_members RUN_DIR NODE absent`: when a
# generation formed after the node's trainers took part has none.
generation_members() {
  python3 - "$1/events.jsonl" "$2" "${3:-present}" <<'PY'
import json, re, sys
path, node, want = sys.argv[1:]
on_node = re.compile(r"(^|[-_])" + re.escape(node) + r"-t\d+$")
generations = []
try:
    for line in open(path):
        event = json.loads(line)
        if event.get("event") == "generation":
            generations.append([m for m in event.get("members", []) if on_node.search(m)])
except (OSError, ValueError):
    sys.exit(1)
if not generations:
    sys.exit(1)
if want == "present":
    sys.exit(0 if generations[-1] else 1)
seen = [i for i, g in enumerate(generations) if g]
sys.exit(0 if seen and not generations[-1] and seen[-1] < len(generations) - 1 else 1)
PY
}

# trained_steps RUN_DIR: the job's last committed step in its events (0 before the first).
trained_steps() {
  python3 - "$1/events.jsonl" <<'PY'
import json, sys
step = 0
try:
    for line in open(sys.argv[1]):
        event = json.loads(line)
        if event.get("event") == "step":
            step = max(step, event.get("step", 0))
except (OSError, ValueError):
    pass
print(step)
PY
}

#!/usr/bin/env bash
# Qualifies the cells lockstep ships (docs/qualify.md) and writes their records and reports into
# qualify/; then run ci/models-md to rebuild docs/MODELS.md from them. Outside `make test`: each
# cell takes a few minutes on 2 cores. Usage: qualify/run-shipped-cells.sh [LOCKSTEP_BINARY]
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/bin/lockstep}
DRAFT=${QUALIFY_DRAFT:-/tmp/lockstep-smol-q4_0.gguf}
"$BIN" pull smollm2-135m >/dev/null && "$BIN" pull gemma3-270m >/dev/null || exit 2
# The Q4_0 draft, made from the same file as docs/speculative.md makes it.
[ -f "$DRAFT" ] || "$BIN" quantize smollm2-135m --type Q4_0 --out "$DRAFT" -q >/dev/null || exit 2
status=0
run() {  # exit 1 (NOT QUALIFIED) is a result, recorded; anything else is an error
  echo "== lockstep qualify $*" >&2
  "$BIN" qualify --out qualify "$@"
  rc=$?
  [ "$rc" -le 1 ] || status=2
}
run --model smollm2-135m --cell smollm2-135m-q4_1-plain
run --model smollm2-135m --draft "$DRAFT" --cell smollm2-135m-q4_1-draft-q4_0
run --model smollm2-135m --ngram --cell smollm2-135m-q4_1-ngram
run --model smollm2-135m --kv-k q8_0 --kv-v q5_1 --cell smollm2-135m-q4_1-kv-q8_0-q5_1
run --model gemma3-270m --cell gemma3-270m-q4_k_m-plain
exit $status

#!/usr/bin/env bash
# libFuzzer over the lab's parsers (fuzz/README.md): every target at once for SECONDS each (default
# 3600), at the lowest CPU priority so a build beside them keeps its cores. Each target starts from
# the committed seeds fuzz/seeds/<target> and regressions fuzz/regressions/<target>, plus the corpus a
# previous run on this machine grew (fuzz/corpus/<target>, ignored: the tree keeps seeds only), works in
# fuzz/work/<target> (ignored), writes what it finds to fuzz/artifacts/<target> and its log to
# fuzz/logs/<target>.log; at the end the working corpus is merged (minimised) into fuzz/corpus/<target>
# and the log's closing statistics replace the target's row of fuzz/logs/summary.md (committed).
#   bash scripts/fuzz.sh                 # build, then every target for an hour
#   SECONDS_EACH=60 bash scripts/fuzz.sh gguf config
#   SUMMARY_ONLY=1 bash scripts/fuzz.sh config   # the rows of finished runs again, from their logs
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
each=${SECONDS_EACH:-3600}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(gguf safetensors config run_folder hub_names hub_headers results_walker)
# No sanitizer: the code is safe Rust over mapped files; overflow checks and debug assertions on
# (-a), so an overflow that a release build would wrap is a crash here.
max_len() { case "$1" in gguf|safetensors|hub_headers) echo 65536 ;; config|results_walker) echo 8192 ;; *) echo 16384 ;; esac; }
mkdir -p logs
declare -A pid
[ -n "${SUMMARY_ONLY:-}" ] || RUSTC_BOOTSTRAP=1 cargo fuzz build -s none -a
for t in "${targets[@]}"; do
  [ -z "${SUMMARY_ONLY:-}" ] || continue
  mkdir -p "work/$t" "corpus/$t" "artifacts/$t"
  [ -d "seeds/$t" ] && cp -n seeds/"$t"/* "work/$t/" 2>/dev/null || true
  [ -d "regressions/$t" ] && cp -n regressions/"$t"/* "work/$t/" 2>/dev/null || true
  cp -n corpus/"$t"/* "work/$t/" 2>/dev/null || true
  nice -n 19 "target/x86_64-unknown-linux-gnu/release/$t" "work/$t" \
    -max_total_time="$each" -max_len="$(max_len "$t")" -rss_limit_mb=3072 -timeout=30 \
    -artifact_prefix="artifacts/$t/" -print_final_stats=1 >"logs/$t.log" 2>&1 &
  pid[$t]=$!
  echo "$t: pid ${pid[$t]}, ${each} s, log fuzz/logs/$t.log"
done
status=0
for t in "${!pid[@]}"; do wait "${pid[$t]}" || status=1; done
# One row a target in logs/summary.md: a run of some targets replaces their rows only.
summary=logs/summary.md
[ -f "$summary" ] || printf '# libFuzzer runs (%s cores shared, nice 19)\n\n| target | date | seconds | executions | exec/s | coverage (edges) | features | corpus | crashes |\n|---|---|---|---|---|---|---|---|---|\n' "$(nproc)" >"$summary"
for t in "${targets[@]}"; do
  log="logs/$t.log"
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1 || true)
  # A run that crashed has no closing lines: its fields stay `?` (grep's miss is not an error).
  field() { grep -oE "$1" "$2" | awk "{print \$$3}" | tail -1 || true; }
  execs=$(field 'stat::number_of_executed_units:[[:space:]]+[0-9]+' "$log" 2)
  rate=$(field 'stat::average_exec_per_sec:[[:space:]]+[0-9]+' "$log" 2)
  secs=$(field 'Done [0-9]+ runs in [0-9]+ second' "$log" 5)
  cov=$(echo "$done_line" | grep -oE 'cov: [0-9]+' | awk '{print $2}' || true)
  ft=$(echo "$done_line" | grep -oE 'ft: [0-9]+' | awk '{print $2}' || true)
  crashes=$(find "artifacts/$t" -type f | wc -l)
  # The working corpus, minimised into the committed one.
  rm -rf "work/$t.min" && mkdir -p "work/$t.min"
  "target/x86_64-unknown-linux-gnu/release/$t" -merge=1 -max_len="$(max_len "$t")" "work/$t.min" "work/$t" "corpus/$t" >"logs/$t.merge.log" 2>&1 || true
  rm -rf "corpus/$t" && mv "work/$t.min" "corpus/$t"
  grep -v "^| $t |" "$summary" >"$summary.tmp" || true
  echo "| $t | $(date -u +%Y-%m-%d) | ${secs:-?} | ${execs:-?} | ${rate:-?} | ${cov:-?} | ${ft:-?} | $(find "corpus/$t" -type f | wc -l) files | $crashes |" >>"$summary.tmp"
  mv "$summary.tmp" "$summary"
done
cat "$summary"
exit $status

# What the one-call GPU scripts (decode_speed.sh, prefill_speed.sh) share; sourced after RES is set and
# made. unpack: a binary the call carried xz-compressed, made runnable; want: whether ONLY (a list of
# parts, empty for all) names a part; log: a timed line in $RES/progress.txt; run NAME ENV... COMMAND...:
# its stdout and stderr in $RES/NAME.txt, its exit code and time in progress.txt.
unpack() { python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" "$1" "$2" && chmod +x "$2"; }
want() { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]; }
log() { echo "### $(date -u +%H:%M:%S) $*" | tee -a "$RES/progress.txt"; }
run() {
  local name=$1; shift
  local start=$SECONDS
  log "$name: $*"
  env "$@" > "$RES/$name.txt" 2>&1
  log "$name exit $? after $((SECONDS - start)) s"
}

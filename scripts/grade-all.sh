#!/usr/bin/env bash
# 全班评分 · Grading a whole class (exercises/README.md).
#
#   scripts/grade-all.sh SUBMISSIONS OUT.csv
#   EXERCISES_SEED=<只有你知道的数 a number only you know> LIMIT_S=60 scripts/grade-all.sh SUBMISSIONS OUT.csv
#
# SUBMISSIONS 里每个学生一份:NAME.rs,或者文件夹 NAME/ 里的 student.rs(或 exercises/src/student.rs)。
# 每份放进同一份新的学生副本(scripts/student-copy.sh --worktree:你的评分测试,没有答案),编译一次,
# 然后每个练习单独运行,各有 LIMIT_S 秒(默认 60);OUT.csv 每个学生一行,每个练习一列:
# pass、fail、todo(还是 todo!())、timeout、build(编译不过);去掉空白和 // 注释后完全相同的提交在
# same_as 列里互相指出。OUT.csv 已存在时拒绝运行(不覆盖)。
# One submission a student: NAME.rs, or a folder NAME/ holding student.rs (or exercises/src/student.rs). Each goes
# into one fresh student's copy (scripts/student-copy.sh --worktree: your grading tests, no answers), is built once,
# and each exercise runs on its own under LIMIT_S seconds (default 60). OUT.csv has a row a student and a column an
# exercise: pass, fail, todo (still todo!()), timeout, build (does not compile); submissions equal once whitespace and
# // comments are removed name each other in same_as. An existing OUT.csv is refused, never overwritten.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 2 ] || { echo "usage: $0 SUBMISSIONS OUT.csv" >&2; exit 2; }
subs=$1
out=$2
limit=${LIMIT_S:-60}
[ -d "$subs" ] || { echo "$subs is not a folder of submissions" >&2; exit 2; }
[ ! -e "$out" ] || { echo "$out exists: give a new file" >&2; exit 2; }
exercises=$(grep -o '^fn exercise_[0-9]*_[a-z0-9_]*' exercises/tests/grade.rs | sed 's/^fn //')
[ -n "$exercises" ] || { echo "no exercise_N test in exercises/tests/grade.rs" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/grade-all.XXXXXX")
# The lab's dependencies are built once, in this checkout's target/; the copy's own crates beside them.
export CARGO_TARGET_DIR=$PWD/target/grade-all
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
bash scripts/student-copy.sh "$work/copy" --worktree > /dev/null
student_rs=$work/copy/exercises/src/student.rs

# NAME and its file, one a line.
list() {
  for s in "$subs"/*; do
    name=$(basename "$s" .rs)
    # A name becomes a CSV cell and a word of this script: letters, digits, `.`, `_`, `-` only.
    if [[ ! "$name" =~ ^[A-Za-z0-9._-]+$ ]]; then
      echo "skipped $(printf '%q' "$s"): a submission's name is letters, digits, '.', '_' and '-'" >&2
      continue
    fi
    if [ -f "$s" ] && [ "${s%.rs}" != "$s" ]; then
      echo "$name	$s"
    elif [ -f "$s/student.rs" ]; then
      echo "$name	$s/student.rs"
    elif [ -f "$s/exercises/src/student.rs" ]; then
      echo "$name	$s/exercises/src/student.rs"
    fi
  done
}

# What two submissions share once whitespace and // comments are gone.
fingerprint() { sed 's://.*$::' "$1" | tr -d ' \t\r\n' | sha256sum | cut -c1-16; }

list > "$work/list"
while IFS=$'\t' read -r name file; do echo "$name $(fingerprint "$file")"; done < "$work/list" > "$work/prints"
[ -s "$work/prints" ] || { echo "no NAME.rs or NAME/student.rs in $subs" >&2; exit 2; }

header=student
for e in $exercises; do header+=",${e%%_[a-z]*}"; done
header+=",passed,of,same_as,seconds"
rows=$work/rows.csv
echo "$header" > "$rows"
while IFS=$'\t' read -r name file; do
  start=$(date +%s)
  cp "$file" "$student_rs"
  line=$name
  passed=0
  n=0
  exe=$( (cd "$work/copy" && timeout 900 cargo test -q -p exercises --test grade --no-run --message-format=json 2> "$work/$name.build.txt" < /dev/null) |
    python3 -c "import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get('reason') == 'compiler-artifact' and m.get('executable') and m['target']['name'] == 'grade': print(m['executable'])" | tail -1 || true)
  for e in $exercises; do
    n=$((n + 1))
    if [ -z "$exe" ]; then
      line+=",build"
      continue
    fi
    set +e
    (cd "$work/copy/exercises" && timeout "$limit" "$exe" --exact "$e" --test-threads=1 > "$work/$name.$e.txt" 2>&1 < /dev/null)
    rc=$?
    set -e
    if [ $rc -eq 0 ]; then
      line+=",pass"
      passed=$((passed + 1))
    elif [ $rc -eq 124 ]; then
      line+=",timeout"
    elif grep -q "not yet implemented" "$work/$name.$e.txt"; then
      line+=",todo"
    else
      line+=",fail"
    fi
  done
  print=$(awk -v n="$name" '$1 == n {print $2}' "$work/prints")
  same=$(awk -v n="$name" -v p="$print" '$2 == p && $1 != n {print $1}' "$work/prints" | paste -sd';' -)
  echo "$line,$passed,$n,$same,$(($(date +%s) - start))" >> "$rows"
  echo "$name: $passed / $n${same:+ (same as $same)}" >&2
done < "$work/list"
cp "$rows" "$out"
echo "wrote $out" >&2

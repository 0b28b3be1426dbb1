#!/usr/bin/env bash
# 学生副本:仓库的一份拷贝,不含练习的参考答案(exercises/README.md)。
# A student's copy of the repository without the exercises' answers (exercises/README.md).
#
#   scripts/student-copy.sh DEST              # the committed tree (git archive HEAD)
#   scripts/student-copy.sh DEST --worktree   # the working tree: tracked and untracked files,
#                                             # less what .gitignore ignores
#   scripts/student-copy.sh DEST --clear-outputs   # and the notebooks without their outputs, so a
#                                             # class predicts before it runs (either order, with --worktree)
#
# exercises/solutions/answers.rs is replaced by a file whose only item is a compile_error!, so the
# feature `solutions` stays declared (no cfg warning in the student's build) and enabling it stops
# the build with a message saying the answers are not in this copy. The grader (exercises/tests/)
# stays: it holds no answers, only the lab's functions to call and a seed.
set -euo pipefail
cd "$(dirname "$0")/.."
usage() { echo "usage: $0 DEST [--worktree] [--clear-outputs]" >&2; exit 2; }
[ $# -ge 1 ] && [ $# -le 3 ] || usage
dest=$1
shift
mode=head
clear=
for a in "$@"; do
  case "$a" in --worktree) mode=$a ;; --clear-outputs) clear=1 ;; *) usage ;; esac
done
if [ -e "$dest" ] && [ -n "$(ls -A "$dest" 2>/dev/null)" ]; then
  echo "$dest exists and is not empty: give a new or empty folder" >&2
  exit 1
fi
mkdir -p "$dest"
if [ "$mode" = head ]; then
  git archive --format=tar HEAD | tar -x -C "$dest"
else
  git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
    [ -e "$f" ] && printf '%s\0' "$f"
  done | tar --null -T - -cf - | tar -x -C "$dest"
fi
[ -d "$dest/exercises" ] || { echo "no exercises/ in the copied tree (uncommitted? try --worktree)" >&2; exit 1; }

rm -rf "$dest/exercises/solutions"
mkdir -p "$dest/exercises/solutions"
cat > "$dest/exercises/solutions/answers.rs" <<'EOF'
// 学生副本不含参考答案。/ A student's copy holds no answers.
compile_error!(
    "练习的参考答案不在学生副本里:去掉 --features solutions,在 exercises/src/student.rs 里写你自己的答案。 / \
     The exercises' answers are not in a student's copy: drop --features solutions and write your own in exercises/src/student.rs."
);
EOF
if [ -n "$clear" ]; then
  python3 - "$dest"/notebooks/*.ipynb <<'PY'
import json, sys
for path in sys.argv[1:]:
    raw = open(path, encoding="utf-8").read()
    nb = json.loads(raw)
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
    indent = 1 if '\n "cells"' in raw else 2
    open(path, "w", encoding="utf-8").write(json.dumps(nb, ensure_ascii=False, indent=indent) + "\n")
PY
  echo "notebooks without outputs: run them in class"
fi
echo "student copy in $dest: exercises/solutions/ holds no answers (exercises/README.md)"

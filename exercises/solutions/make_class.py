"""Five synthetic submissions for rehearsing scripts/grade-all.sh, made from the reference answers (so, like them, never
in a student's copy): correct, stubbed (the student's todo!() file), half done (exercises 1-4 answered), a duplicate of
the correct one (other spacing and comments), and one whose exercise 3 never returns.

    python3 exercises/solutions/make_class.py DEST
"""
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
answers = (HERE / "answers.rs").read_text()
stub = (HERE.parent / "src" / "student.rs").read_text()


def bodies(src):
    """Each `pub fn`'s name and the span of its body, braces matched."""
    out = []
    for m in re.finditer(r"pub fn (\w+)\(", src):
        open_at = src.index("{", src.index(")", m.end()))
        depth, i = 0, open_at
        while True:
            depth += {"{": 1, "}": -1}.get(src[i], 0)
            if depth == 0:
                break
            i += 1
        out.append((m.group(1), open_at, i + 1))
    return out


def replaced(src, new_body):
    """`src` with the body of each function `new_body` names replaced."""
    for name, start, end in reversed(bodies(src)):
        if name in new_body:
            src = src[:start] + new_body[name] + src[end:]
    return src


names = [n for n, _, _ in bodies(answers)]
assert len(names) == 8, names
dest = Path(sys.argv[1])
dest.mkdir(parents=True, exist_ok=False)
(dest / "correct.rs").write_text(answers)
(dest / "stubbed.rs").write_text(stub)
(dest / "half_done.rs").write_text(replaced(answers, {n: f'{{\n    todo!("练习 {i + 1} / exercise {i + 1}")\n}}' for i, n in enumerate(names) if i >= 4}))
(dest / "duplicate.rs").write_text("// my own work\n" + re.sub(r"\n\n", "\n\n\n", answers).replace("    ", "  "))
(dest / "loops.rs").write_text(replaced(answers, {names[2]: "{\n    loop {\n        std::hint::spin_loop();\n    }\n}"}))
print(f"5 submissions in {dest}")

//! # 练习 · Graded exercises
//!
//! 笔记本 01–06 里的算术,写成函数:学生在 `src/student.rs` 里补全每个函数(现在是 `todo!()`),
//! `cargo test -p exercises` 在学生看不到的配置上(实验室的预设加上随机生成的模型、显卡和批量)
//! 把结果和实验室自己的函数逐一比较。整数字节数要求完全相等,浮点数要求相对误差很小。
//!
//! The notebooks' arithmetic as functions: the student fills in each function of `src/student.rs`
//! (a `todo!()` now), and `cargo test -p exercises` compares it with the lab's own function on
//! configs the student does not see (the lab's presets and seeded random models, cards and
//! batches): byte counts must be equal, rates within a tight relative tolerance.
//!
//! | 练习 exercise | 函数 function | 笔记本 notebook | 对照 graded against |
//! |---|---|---|---|
//! | 1 | [`param_count`] | 01 | `DecoderConfig::param_count` |
//! | 2 | [`decode_ceiling_tok_s`] | 01 | `estimate::decode_ceiling_tok_s` of `estimate::decode_read_bytes` |
//! | 3 | [`kv_bytes_per_token`] | 02, 05 | `estimate::kv_bytes_per_token` |
//! | 4 | [`longest_context`] | 02, 03 | `estimate::remedies` ("shorter context") |
//! | 5 | [`train_state_bytes`] | 05, 06 | `estimate::training::ledger(..).total()` |
//! | 6 | [`pytorch_step_peak`] | 05 | `estimate::training::pytorch_step` + the F32 AdamW ledger |
//! | 7 | [`tp_rank_weight_bytes`] | 06 | `model::parallel::rank_ledger(..).weights()` |
//! | 8 | [`nccl_bytes`] | 06 | `estimate::parallel::nccl_bytes` |
//!
//! 笔记本里用 [`attempt`] 调用学生的函数(还没写时不会让单元格失败),用 [`verdict`] 打印一行结论。
//! In a notebook, [`attempt`] calls the student's function (a `todo!()` does not fail the cell) and
//! [`verdict`] prints a one-line verdict beside the lab's value.
//!
//! 特性 `solutions` 换成参考答案(`solutions/answers.rs`),CI 用它确认评分测试本身是对的;
//! 学生副本(`scripts/student-copy.sh`)里没有答案。
//! The `solutions` feature swaps in the reference answers (`solutions/answers.rs`): CI checks with
//! it that the grading tests can pass; a student's copy (`scripts/student-copy.sh`) has no answers.

#[cfg(not(feature = "solutions"))]
mod student;
#[cfg(not(feature = "solutions"))]
pub use student::*;

#[cfg(feature = "solutions")]
#[path = "../solutions/answers.rs"]
mod answers;
#[cfg(feature = "solutions")]
pub use answers::*;

use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

/// 调用学生的函数:它 panic(比如还是 `todo!()`)时返回 `None`,且不向 stderr 输出任何东西。
/// Runs the student's function: `None` where it panics (a `todo!()` still in place, or an
/// overflow), with nothing written to stderr — a notebook's run fails on any stderr output.
///
/// While `f` runs, panics on this thread are silent; panics on other threads still reach the
/// hook that was installed before (one attempt at a time: the hook is swapped under a lock).
pub fn attempt<T>(f: impl FnOnce() -> T) -> Option<T> {
    static HOOK: Mutex<()> = Mutex::new(());
    let _one_at_a_time = HOOK.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let before = Arc::new(panic::take_hook());
    let me = std::thread::current().id();
    let others = Arc::clone(&before);
    panic::set_hook(Box::new(move |info| {
        if std::thread::current().id() != me {
            others(info)
        }
    }));
    let result = panic::catch_unwind(AssertUnwindSafe(f));
    // Drop the silent hook (and its handle on the one before), then put that one back as it was.
    drop(panic::take_hook());
    if let Ok(hook) = Arc::try_unwrap(before) {
        panic::set_hook(hook);
    }
    result.ok()
}

/// 一行中英结论:还没有作答 / 正确 / 差了多少。
/// A one-line bilingual verdict on the student's value against the lab's: not answered yet (the
/// function panicked, a `todo!()` still there), correct within `rel_tol` (relative; 0 asks for
/// equality), or off by how much.
pub fn verdict(name: &str, student: Option<f64>, lab: f64, rel_tol: f64) -> String {
    let Some(answer) = student else {
        return format!(
            "{name}: 还没有作答 / not answered yet — the function panics (a todo!() in exercises/src/student.rs?)"
        );
    };
    let err = (answer - lab).abs() / lab.abs().max(f64::MIN_POSITIVE);
    if answer == lab || err <= rel_tol {
        format!("{name}: ✅ 正确 / correct ({answer})")
    } else if answer.is_finite() {
        format!("{name}: ❌ {answer} 差了 / is off by {:.3}% — 再想想 / try again", err * 100.0)
    } else {
        format!("{name}: ❌ {answer} — 再想想 / try again")
    }
}
